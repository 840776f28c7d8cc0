/**
 * The semaphore's record, the one a generation file of a semaphore's folder holds (written once, complete
 * before its name appears, never changed): the stored limit, the leases (owner, permits, sequence, deadline)
 * and the line of waiters, with how it is read back, the live view of it (expired leases and lapsed places
 * left out), and what the sweep asks of it.
 *
 * Deadlines are ms on the host's monotonic clock (CLOCK_MONOTONIC, the same for every process of one
 * boot, never stepped), tagged with the boot id: the mutex's clock (../host-clock.ts). A record of another
 * boot holds nothing: every lease and place in it ended with that boot.
 */
import { type Current, readState } from '../generations.js'
import { allGone, checkable, type HolderProcesses } from '../holders.js'
import { monotonicMs, sameBoot } from '../host-clock.js'
import type { Root } from '../root.js'
import type { SweptRecords } from '../sweep.js'

/** One lease: `permits` permits held by the acquire `owner` until `deadline`. */
export interface PermitLease {
  readonly owner: string
  readonly permits: number
  /** Decimal string: the grant's sequence (`base` + the generation that granted it). */
  readonly sequence: string
  /** ms on the host's monotonic clock. */
  readonly deadline: number
  readonly holder?: string
  /** The processes the lease lives with (../holders.ts): when all are gone, it is over at once. */
  readonly processes?: HolderProcesses
}

/** One place in line: the acquire `owner` waits for `permits`, and keeps its place until `keptUntil`. */
export interface Place {
  readonly owner: string
  readonly permits: number
  /** ms on the host's monotonic clock. */
  readonly keptUntil: number
}

export interface SemaphoreRecord {
  readonly v: 1
  readonly kind: 'semaphore'
  readonly key: string
  /** The stored limit; null once nothing held or waited: the next acquire stores its own. */
  readonly limit: number | null
  readonly boot: string
  /** Decimal string: the sequence of any generation g of this folder is `base + g`. */
  readonly base: string
  /** Decimal string: the latest sequence granted in this folder; absent before the first grant. */
  readonly latest?: string
  readonly leases: readonly PermitLease[]
  /** Waiters in arrival order. */
  readonly line: readonly Place[]
}

const DECIMAL = /^\d{1,60}$/

const isLease = (l: Partial<PermitLease>): boolean =>
  typeof l?.owner === 'string' &&
  Number.isSafeInteger(l.permits) &&
  typeof l.sequence === 'string' &&
  DECIMAL.test(l.sequence) &&
  typeof l.deadline === 'number' &&
  (l.holder === undefined || typeof l.holder === 'string')

const isPlace = (p: Partial<Place>): boolean =>
  typeof p?.owner === 'string' && Number.isSafeInteger(p.permits) && typeof p.keptUntil === 'number'

export function parseSemaphore(text: string): SemaphoreRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<SemaphoreRecord>
    if (
      r.v === 1 &&
      r.kind === 'semaphore' &&
      typeof r.key === 'string' &&
      (r.limit === null || Number.isSafeInteger(r.limit)) &&
      typeof r.boot === 'string' &&
      typeof r.base === 'string' &&
      DECIMAL.test(r.base) &&
      (r.latest === undefined || (typeof r.latest === 'string' && DECIMAL.test(r.latest))) &&
      Array.isArray(r.leases) &&
      r.leases.every(isLease) &&
      Array.isArray(r.line) &&
      r.line.every(isPlace)
    ) {
      return r as SemaphoreRecord
    }
  } catch {}
  return undefined
}

/** The state of the semaphore folder `folder`: its highest generation and that file's record. */
export const readSemaphore = (folder: string): Promise<Current<SemaphoreRecord>> =>
  readState(folder, parseSemaphore)

/** Whether `lease` of a record written in boot `recordBoot` still holds its permits. */
export function leaseLive(lease: PermitLease, recordBoot: string, boot: string): boolean {
  if (!sameBoot(recordBoot, boot) || monotonicMs() >= lease.deadline) return false
  // Its processes all gone: nobody can renew or release it, and nothing it guarded runs.
  return !(checkable(lease.processes, recordBoot, boot) && allGone(lease.processes))
}

/** Whether `lease` names processes this host can check (a waiter then looks again soon). */
export const leaseCheckable = (lease: PermitLease, recordBoot: string, boot: string): boolean =>
  checkable(lease.processes, recordBoot, boot)

/** The record as it stands now: expired leases and lapsed places left out (another boot's: all of them). */
export function liveView(record: SemaphoreRecord, boot: string): SemaphoreRecord {
  const same = sameBoot(record.boot, boot)
  const t = monotonicMs()
  return {
    ...record,
    leases: record.leases.filter((lease) => leaseLive(lease, record.boot, boot)),
    line: same ? record.line.filter((place) => place.keptUntil > t) : [],
  }
}

/** The permits the leases of `record` hold. */
export const heldOf = (record: SemaphoreRecord): number =>
  record.leases.reduce((sum, lease) => sum + lease.permits, 0)

/**
 * How long ago `record`'s semaphore became idle (nothing held, nobody waiting), its file written `age` ms
 * ago; undefined while a lease holds or a place is kept. An idle semaphore may be forgotten: its folder
 * goes, and the next grant starts a fresh range of sequences above every earlier one (../retire.ts).
 */
function idleFor(root: Root, record: SemaphoreRecord, age: number): number | undefined {
  if (!sameBoot(record.boot, root.boot)) return age
  const live = liveView(record, root.boot)
  if (live.leases.length > 0 || live.line.length > 0) return undefined
  // Ended at the latest deadline or place among them (or when their processes died: at most `age` ago).
  let end = Number.NEGATIVE_INFINITY
  for (const lease of record.leases) end = Math.max(end, lease.deadline)
  for (const place of record.line) end = Math.max(end, place.keptUntil)
  return end === Number.NEGATIVE_INFINITY ? age : Math.min(age, Math.max(0, monotonicMs() - end))
}

/** The semaphore's records as the sweep judges them (../sweep.ts). */
export const SEMAPHORE_RECORDS: SweptRecords<SemaphoreRecord> = {
  parse: parseSemaphore,
  keyOf: (record) => record.key,
  endedFor: idleFor,
}
