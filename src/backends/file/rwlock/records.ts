/**
 * The read-write lock's record, the one a generation file of its folder holds (written once, complete before
 * its name appears, never changed): the line of entries in arrival order, each a reader or a writer,
 * granted (with its fence and lease deadline) or waiting (with the deadline of its kept place), and the
 * fences it needs to go on (the latest granted, the current read epoch), with how it is read back, the live
 * view of it (ended leases and lapsed places left out), and what the sweep asks of it.
 *
 * Deadlines are ms on the host's monotonic clock, tagged with the boot id, as the mutex's and the
 * semaphore's (../host-clock.ts). A record of another boot holds nothing, and its read epoch is not reused:
 * a power loss may have taken its last generations (and a writer's fence) with it.
 */
import type { RwLockMode } from '../../../core/backend.js'
import { type Current, readState } from '../generations.js'
import { allGone, checkable, type HolderProcesses } from '../holders.js'
import { monotonicMs, sameBoot } from '../host-clock.js'
import type { Root } from '../root.js'
import type { SweptRecords } from '../sweep.js'

/** One entry of the line: the acquire `owner`, granted once it has a fence. */
export interface RwEntry {
  readonly owner: string
  readonly mode: RwLockMode
  /** Decimal string: the grant's fence; absent while the entry waits. */
  readonly fence?: string
  /** ms on the host's monotonic clock: the lease's end once granted, the place's until then. */
  readonly deadline: number
  readonly holder?: string
  /** The processes a granted lease lives with (../holders.ts): when all are gone, it is over at once. */
  readonly processes?: HolderProcesses
}

export interface RwLockRecord {
  readonly v: 1
  readonly kind: 'rwlock'
  readonly key: string
  readonly boot: string
  /** Decimal string: the sequence of any generation g of this folder is `base + g`. */
  readonly base: string
  /** Decimal string: the latest fence granted in this folder; absent before the first grant. */
  readonly latest?: string
  /** Decimal string: the read epoch, current while it equals `latest` (no writer granted since). */
  readonly epoch?: string
  /** Granted entries first, then the waiting ones, in arrival order. */
  readonly line: readonly RwEntry[]
}

const DECIMAL = /^\d{1,60}$/

const isDecimal = (value: unknown): boolean => typeof value === 'string' && DECIMAL.test(value)

const isEntry = (e: Partial<RwEntry>): boolean =>
  typeof e?.owner === 'string' &&
  (e.mode === 'read' || e.mode === 'write') &&
  (e.fence === undefined || isDecimal(e.fence)) &&
  typeof e.deadline === 'number' &&
  (e.holder === undefined || typeof e.holder === 'string')

export function parseRwLock(text: string): RwLockRecord | undefined {
  try {
    const r = JSON.parse(text) as Partial<RwLockRecord>
    if (
      r.v === 1 &&
      r.kind === 'rwlock' &&
      typeof r.key === 'string' &&
      typeof r.boot === 'string' &&
      isDecimal(r.base) &&
      (r.latest === undefined || isDecimal(r.latest)) &&
      (r.epoch === undefined || isDecimal(r.epoch)) &&
      Array.isArray(r.line) &&
      r.line.every(isEntry)
    ) {
      return r as RwLockRecord
    }
  } catch {}
  return undefined
}

/** The state of the read-write lock folder `folder`: its highest generation and that file's record. */
export const readRwLock = (folder: string): Promise<Current<RwLockRecord>> => readState(folder, parseRwLock)

/** Whether `entry` of a record written in boot `recordBoot` is still in line (a lease held, a place kept). */
function entryLive(entry: RwEntry, recordBoot: string, boot: string): boolean {
  if (!sameBoot(recordBoot, boot) || monotonicMs() >= entry.deadline) return false
  // A granted lease whose processes are all gone: nobody can renew or release it, and nothing it guarded runs.
  return !(
    entry.fence !== undefined &&
    checkable(entry.processes, recordBoot, boot) &&
    allGone(entry.processes!)
  )
}

/** Whether `entry` is a lease naming processes this host can check (a waiter then looks again soon). */
export const entryCheckable = (entry: RwEntry, recordBoot: string, boot: string): boolean =>
  entry.fence !== undefined && checkable(entry.processes, recordBoot, boot)

/** The record as it stands now: ended entries left out (another boot's: all of them, and its read epoch). */
export function liveView(record: RwLockRecord, boot: string): RwLockRecord {
  const line = record.line.filter((entry) => entryLive(entry, record.boot, boot))
  if (sameBoot(record.boot, boot)) return { ...record, line }
  const { epoch: _lost, ...rest } = record
  return { ...rest, line }
}

/**
 * How long ago `record`'s lock became idle (nobody holds or waits), its file written `age` ms ago;
 * undefined while an entry is in line. An idle lock may be forgotten: its folder goes, and the next grant
 * starts a fresh range of fences above every earlier one (../retire.ts).
 */
function idleFor(root: Root, record: RwLockRecord, age: number): number | undefined {
  if (!sameBoot(record.boot, root.boot)) return age
  if (liveView(record, root.boot).line.length > 0) return undefined
  let end = Number.NEGATIVE_INFINITY
  for (const entry of record.line) end = Math.max(end, entry.deadline)
  return end === Number.NEGATIVE_INFINITY ? age : Math.min(age, Math.max(0, monotonicMs() - end))
}

/** The read-write locks' records as the sweep judges them (../sweep.ts). */
export const RWLOCK_RECORDS: SweptRecords<RwLockRecord> = {
  parse: parseRwLock,
  keyOf: (record) => record.key,
  endedFor: idleFor,
}
