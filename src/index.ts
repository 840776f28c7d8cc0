export { createLockClient } from './client.js'
export type {
  AcquireRequest,
  AttemptResult,
  BackendCapabilities,
  BreakOptions,
  BreakResult,
  Busy,
  DoctorFinding,
  ExpiryKind,
  ExtendOutcome,
  ExtendResult,
  Grant,
  HeldLease,
  ListedLock,
  LockBackend,
  LockInfo,
} from './core/backend.js'
export type { LockClient } from './core/client.js'
export { channels, type LossReason } from './core/diagnostics.js'
export type { Duration } from './core/durations.js'
export { parseDuration } from './core/durations.js'
export {
  BackendUnavailableError,
  CapabilityError,
  ClientClosedError,
  DriverMissingError,
  type FencelockErrorCode,
  LockError,
  type LockErrorContext,
  LockLostError,
  LockNotAcquiredError,
  LockReleasedError,
  type NodeFailure,
  QuorumError,
} from './core/errors.js'
export type { Lock } from './core/lock.js'
export type { AcquireOptions, ClientOptions } from './core/options.js'
