export { createLockClient } from './client.js'
export type {
  AcquireRequest,
  AllAttemptResult,
  AttemptResult,
  BackendCapabilities,
  BreakOptions,
  BreakResult,
  Busy,
  DoctorFinding,
  DowngradeResult,
  ElectionFacet,
  ExpiryKind,
  ExtendOutcome,
  ExtendResult,
  Grant,
  HeldLease,
  LeaseFacet,
  ListedLock,
  LockBackend,
  LockInfo,
  MultiKeyFacet,
  PermitHolder,
  PermitRequest,
  ProclaimResult,
  ResumeFacet,
  RwLockFacet,
  RwLockHolder,
  RwLockInfo,
  RwLockMode,
  RwLockRequest,
  SemaphoreFacet,
  SemaphoreInfo,
} from './core/backend.js'
export type { LockClient } from './core/client.js'
export { channels, type LossReason } from './core/diagnostics.js'
export type { Duration } from './core/durations.js'
export { parseDuration } from './core/durations.js'
export type { CampaignOptions, Election, Leadership, LeaderView } from './core/election.js'
export {
  BackendUnavailableError,
  CapabilityError,
  ClientClosedError,
  DriverMissingError,
  type FencelockErrorCode,
  LimitMismatchError,
  LockError,
  type LockErrorContext,
  LockLostError,
  LockNotAcquiredError,
  LockReleasedError,
  type NodeFailure,
  QuorumError,
} from './core/errors.js'
export type { Lock } from './core/lock.js'
export type { AcquireAllOptions, MultiLock } from './core/multi-key.js'
export type { AcquireOptions, ClientOptions, LockOptions } from './core/options.js'
export type { ResumeOptions } from './core/resume.js'
export type { ReadLock, RwLock, RwLockHolderView, RwLockView, WriteLock } from './core/rwlock.js'
export {
  type HeldPermits,
  MAX_SEMAPHORE_LIMIT,
  type PermitOptions,
  type Semaphore,
  type SemaphoreHolder,
  type SemaphoreLayout,
  type SemaphoreOptions,
  type SemaphoreView,
} from './core/semaphore.js'
export type { SlotPermits, SlotsSemaphore, SlotsView, SlotView } from './core/slots.js'
