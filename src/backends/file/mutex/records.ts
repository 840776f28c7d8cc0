/**
 * The mutex's record, the one a generation file of a key folder holds (written once, complete before its
 * name appears, never changed): its shape, how it is read back, how one is made, the questions the
 * algorithm asks of it (is its lease live, are its processes gone, which base a successor goes on from),
 * and what the sweep asks of it (when its state ended).
 */
import { type Current, readState } from '../generations.js'
import { allGone, checkable, type HolderProcesses } from '../holders.js'
import { monotonicMs, sameBoot } from '../host-clock.js'
import type { Root } from '../root.js'
import type { SweptRecords } from '../sweep.js'

export interface RecordV1 {
  readonly v: 1
  readonly key: string
  readonly state: 'held' | 'free'
  readonly owner: string | null
  /** Decimal string: the fence of the lease (`base` + the generation of its acquiring transition). */
  readonly fence: string
  /**
   * Decimal string: the fence of any generation g of this folder is `base + g` (see ../index.ts). Absent in
   * records written before epochs existed, where it is 0 (the fence was the generation).
   */
  readonly base?: string
  readonly boot: string
  /** ms on the host's monotonic clock. */
  readonly deadline: number
  /** The holder's description (`AcquireRequest.holder`), for `inspect`; absent when free. */
  readonly holder?: string
  /**
   * The processes the lease lives with (holders.ts): when all are gone, the lease is over at once. Absent
   * when free, from older versions, and where processes cannot be told apart for certain (the ttl decides).
   * Read as `unknown` shape: `checkable` checks it before use.
   */
  readonly processes?: HolderProcesses
  /** An election leader's value (`AcquireRequest.value`, or the last proclaimed); a mutex never sets it. */
  readonly value?: string
}

const DECIMAL = /^-?\d{1,60}$/

export function parseRecord(text: string): RecordV1 | undefined {
  try {
    const r = JSON.parse(text) as Partial<RecordV1>
    if (
      r.v === 1 &&
      (r.state === 'held' || r.state === 'free') &&
      typeof r.fence === 'string' &&
      DECIMAL.test(r.fence) &&
      (r.base === undefined || (typeof r.base === 'string' && DECIMAL.test(r.base))) &&
      typeof r.boot === 'string' &&
      typeof r.deadline === 'number' &&
      typeof r.key === 'string' &&
      (r.holder === undefined || typeof r.holder === 'string') &&
      (r.value === undefined || typeof r.value === 'string')
    ) {
      return r as RecordV1
    }
  } catch {}
  return undefined
}

/** The state of the key folder `folder`: its highest generation and that file's record. */
export const readCurrent = (folder: string): Promise<Current<RecordV1>> => readState(folder, parseRecord)

/** The base of a record (0 for records from before epochs). */
export const baseOf = (record: RecordV1): bigint => (record.base === undefined ? 0n : BigInt(record.base))

/** What a new record says; `boot` and the decimal forms are filled in by `newRecord`. */
export interface RecordFields {
  readonly key: string
  readonly state: 'held' | 'free'
  readonly owner: string | null
  readonly fence: bigint
  readonly base: bigint
  /** ms on the host's monotonic clock; 0 for a free record. */
  readonly deadline: number
  readonly holder?: string | undefined
  readonly processes?: HolderProcesses | undefined
  readonly value?: string | undefined
}

/** A record written by this boot (`boot`, from host-clock.ts). */
export function newRecord(fields: RecordFields, boot: string): RecordV1 {
  const { key, state, owner, fence, base, deadline, holder, processes, value } = fields
  return {
    v: 1,
    key,
    state,
    owner,
    fence: fence.toString(),
    base: base.toString(),
    boot,
    deadline,
    ...(holder === undefined ? {} : { holder }),
    ...(processes === undefined ? {} : { processes }),
    ...(value === undefined ? {} : { value }),
  }
}

/** A free record: what release, abandon and breakLock write. Its fence stays the last one granted. */
export const freeRecord = (key: string, fence: bigint, base: bigint, boot: string): RecordV1 =>
  newRecord({ key, state: 'free', owner: null, fence, base, deadline: 0 }, boot)

/** A lease written in this boot and not yet past its deadline on the host's monotonic clock. */
export const isLive = (record: RecordV1, boot: string): boolean =>
  record.state === 'held' && sameBoot(record.boot, boot) && monotonicMs() < record.deadline

/**
 * A held record whose processes are all certainly gone (holders.ts): its lease is over, whatever its
 * deadline says. False in any doubt (nothing recorded, another boot, another pid namespace).
 */
export const holderGone = (record: RecordV1, boot: string): boolean =>
  record.state === 'held' && checkable(record.processes, record.boot, boot) && allGone(record.processes)

/** Whether a held record names processes this host can check (a waiter then looks again soon). */
export const holderCheckable = (record: RecordV1, boot: string): boolean =>
  checkable(record.processes, record.boot, boot)

/**
 * The base a successor of `record` goes on from: its own when it was written in this boot; none (a new
 * epoch) when it was written in another. Within a boot nothing is fsynced, so a power loss may have taken
 * the old boot's last generations of this folder, and their fences, with it: the disk's newest record can
 * be behind what that boot granted. A new epoch of this boot exceeds them all (epochs.ts). Records of this
 * boot are exactly what every process of it wrote: the page cache is shared and outlives process crashes.
 */
export function carriedBase(root: Root, record: RecordV1): bigint | undefined {
  return sameBoot(record.boot, root.boot) || root.durability === 'acquire' ? baseOf(record) : undefined
}

/** How long ago `record`'s lease ended, its file written `age` ms ago; undefined while it is live. */
function endedFor(root: Root, record: RecordV1, age: number): number | undefined {
  if (record.state === 'free') return age
  if (!isLive(record, root.boot)) {
    // Its deadline is on this boot's monotonic clock; another boot's ended at that boot's end, before now.
    return sameBoot(record.boot, root.boot) ? Math.min(age, monotonicMs() - record.deadline) : age
  }
  // Its processes died after its last write (a grant or a renewal): at most that long ago.
  return holderGone(record, root.boot) ? age : undefined
}

/** The mutex's records as the sweep and `doctor` judge them (sweep.ts). */
export const LEASE_RECORDS: SweptRecords<RecordV1> = {
  parse: parseRecord,
  keyOf: (record) => record.key,
  endedFor,
}
