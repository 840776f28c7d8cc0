/**
 * Where a semaphore lives on Redis: its key and channel names, in one place (the backend and the tests use
 * them; nobody copies the format).
 *
 * Every name starts `<prefix>!semaphore{<tag>}`. A lock's names all start `<prefix>{` (../keys.ts) and an
 * election's `<prefix>!election{`, so no lock or election name reaches a semaphore's keys, and `list`'s
 * SCAN of lock keys (`<prefix>{*}`) passes them by: a lock `x` and a semaphore `x` are independent. Every
 * key of one semaphore shares the hash tag, so its scripts touch one Cluster slot.
 */
import { DEFAULT_PREFIX, taggedName } from '../keys.js'

/** The keys and the channel of one semaphore, in the KEYS order of its scripts (scripts.ts). */
export interface RedisSemaphoreKeys {
  /** The stored limit. */
  readonly limit: string
  /** The last sequence minted (the mutex's MINT, its floor the server's clock), kept an hour after it. */
  readonly sequence: string
  /** A sorted set: each lease's owner, scored by its end in ms of the server's clock. */
  readonly leases: string
  /** A hash: each lease's owner → "<permits> <sequence> <description>". */
  readonly grants: string
  /** A sorted set: the line, each waiter's owner scored by its arrival (µs of the server's clock). */
  readonly line: string
  /** A sorted set: each waiter's owner scored by when its place lapses (ms of the server's clock). */
  readonly kept: string
  /** Published to with the owner first in line when it may now fit (a release, a grant, setLimit). */
  readonly changed: string
}

/** The keys of the semaphore named `name` under `prefix`. */
export function redisSemaphoreKeys(name: string, prefix: string = DEFAULT_PREFIX): RedisSemaphoreKeys {
  const { name: base } = taggedName(name, `${prefix}!semaphore`)
  return {
    limit: `${base}:limit`,
    sequence: `${base}:sequence`,
    leases: `${base}:leases`,
    grants: `${base}:grants`,
    line: `${base}:line`,
    kept: `${base}:kept`,
    changed: `${base}:changed`,
  }
}

/** The keys as every script takes them (KEYS[1..6]; the sequence second, where MINT reads it). */
export const scriptKeys = (k: RedisSemaphoreKeys): string[] => [
  k.limit,
  k.sequence,
  k.leases,
  k.grants,
  k.line,
  k.kept,
]
