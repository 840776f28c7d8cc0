/**
 * The lock record of the `cas-lease` engine: what one object (S3, GCS) or item (DynamoDB) holds, as JSON
 * text. It carries no wall-clock time at all: expiry is observed by waiters on their own monotonic clock
 * (engine.ts), so nothing here can be misread by a machine whose clock is wrong.
 *
 * `{"v":1,"owner":…,"fence":"42","leaseMs":30000,"state":"held","holder":…,"nonce":…,"key":…}`
 * - `fence` is a decimal string: a bigint, which JSON numbers cannot carry past 2^53.
 * - `nonce` is fresh random bytes on every write: S3's ETag is a hash of the body, so two writes of the
 *   same body (a renewal that changes nothing else) would give the same version, an ABA that would let a
 *   waiter's observation, or a stale conditional write, pass over a write it never saw.
 * - `key` is the lock's key, so that `list` can name a record whose object name is a hash of it
 *   (objects.ts); records written by versions of fencelock before it lack it (decoded all the same).
 * - `state: 'released'` marks a free lock, until fencelock retires it (retire.ts). One deleted, by
 *   fencelock or behind its back, is made again with a fence above the old ones (fence.ts).
 * - `fresh: true` marks a record made by a create whose fence is not granted yet (fence.ts): whoever
 *   grants on it lifts the fence from the store's clock first. Absent in every other record.
 * - `value` is an election leader's value (election.ts), written with the grant and by every later
 *   write of the hold; absent in a lock's record.
 * - `notBeforeMs` is the store's clock (ms since 1970) that this write was sent after, as the writer's
 *   process last heard it (write.ts): never a client's wall clock. It lets a resume tell a lease whose
 *   time has passed from a live one (resume.ts); absent where the store shows no clock, and in records
 *   of older versions.
 */
import { randomBytes } from 'node:crypto'

export type CasState = 'held' | 'released'

export interface CasRecord {
  /** The acquire's random owner id (`AcquireRequest.owner`): the only thing that says who holds the lock. */
  readonly owner: string
  readonly fence: bigint
  /** The lease the holder asked for, in ms: how long a waiter must see this version unchanged. */
  readonly leaseMs: number
  readonly state: CasState
  /** Diagnostic only (`inspect`). */
  readonly holder?: string | undefined
  readonly nonce: string
  /** The lock's key, as every write names it (write.ts); absent in records of older versions. */
  readonly key?: string | undefined
  /** Made by a create, its fence not granted to anyone yet (fence.ts). */
  readonly fresh?: true | undefined
  /** An election candidate's value (`AcquireRequest.value`, or the last proclaimed); absent on a lock. */
  readonly value?: string | undefined
  /** The store's clock (ms since 1970) this write was sent after, at the least (write.ts). */
  readonly notBeforeMs?: number | undefined
}

/** The record format's version: a record of another version is unreadable, never guessed at. */
const FORMAT = 1

/** A fresh nonce: 96 random bits, so no two writes of one record ever have equal bodies. */
export function newNonce(): string {
  return randomBytes(12).toString('base64url')
}

export function encodeRecord(record: CasRecord): string {
  return JSON.stringify({
    v: FORMAT,
    owner: record.owner,
    fence: record.fence.toString(),
    leaseMs: record.leaseMs,
    state: record.state,
    ...(record.holder === undefined ? {} : { holder: record.holder }),
    nonce: record.nonce,
    ...(record.key === undefined ? {} : { key: record.key }),
    ...(record.fresh ? { fresh: true } : {}),
    ...(record.value === undefined ? {} : { value: record.value }),
    ...(record.notBeforeMs === undefined ? {} : { notBeforeMs: record.notBeforeMs }),
  })
}

/**
 * The record in `body`, or undefined when it is not one of ours (another program's object under our
 * name, a newer format, a truncated write): the engine then never overwrites it, since its fence is
 * unknown and a guess could send fences backwards.
 */
export function decodeRecord(body: string): CasRecord | undefined {
  let raw: Record<string, unknown>
  try {
    raw = JSON.parse(body) as Record<string, unknown>
  } catch {
    return undefined
  }
  if (typeof raw !== 'object' || raw === null || raw.v !== FORMAT) return undefined
  const { owner, fence, leaseMs, state, holder, nonce, key, fresh, value, notBeforeMs } = raw
  if (typeof owner !== 'string' || typeof nonce !== 'string') return undefined
  if (typeof fence !== 'string' || !/^\d{1,40}$/.test(fence)) return undefined
  if (typeof leaseMs !== 'number' || !Number.isFinite(leaseMs) || leaseMs < 0) return undefined
  if (state !== 'held' && state !== 'released') return undefined
  if (holder !== undefined && typeof holder !== 'string') return undefined
  if (key !== undefined && typeof key !== 'string') return undefined
  if (fresh !== undefined && fresh !== true) return undefined
  if (value !== undefined && typeof value !== 'string') return undefined
  if (notBeforeMs !== undefined && !Number.isSafeInteger(notBeforeMs)) return undefined
  return {
    owner,
    fence: BigInt(fence),
    leaseMs,
    state,
    holder,
    nonce,
    ...(key === undefined ? {} : { key }),
    ...(fresh ? { fresh } : {}),
    ...(value === undefined ? {} : { value }),
    ...(notBeforeMs === undefined ? {} : { notBeforeMs: notBeforeMs as number }),
  }
}

/** Whether `record` is held by `owner`. */
export function heldBy(record: CasRecord | undefined, owner: string): boolean {
  return record !== undefined && record.state === 'held' && record.owner === owner
}
