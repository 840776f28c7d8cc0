/**
 * Where a read-write lock lives on Redis: its key and channel names, in one place (the backend and the tests
 * use them; nobody copies the format).
 *
 * Every name starts `<prefix>!rwlock{<tag>}`. A lock's names all start `<prefix>{` (../keys.ts), an
 * election's `<prefix>!election{` and a semaphore's `<prefix>!semaphore{`, so a lock, an election, a
 * semaphore and a read-write lock of one name are independent, and `list`'s SCAN of lock keys passes these
 * by. Every key of one read-write lock shares the hash tag, so its scripts touch one Cluster slot.
 */
import { DEFAULT_PREFIX, taggedName } from '../keys.js'

/** The keys and the channel of one read-write lock, in the KEYS order of its scripts (scripts.ts). */
export interface RedisRwLockKeys {
  /** A sorted set: the line, each entry's owner (reader or writer, granted or waiting) scored by arrival. */
  readonly line: string
  /** The last fence minted (the mutex's MINT, its floor the server's clock), kept an hour after it. */
  readonly fence: string
  /** A sorted set: the writers' entries of the line (granted or waiting), scored as in `line`. */
  readonly writers: string
  /** A sorted set: each entry's owner scored by its end (a lease's, or a kept place's), ms of the server's clock. */
  readonly ends: string
  /** A hash: each granted entry's owner → "<fence> <description>". */
  readonly grants: string
  /** The read epoch: the fence readers share while no writer was granted after it. */
  readonly epoch: string
  /** Published to with the owner id of each waiter that may now be granted. */
  readonly changed: string
}

/** The keys of the read-write lock named `name` under `prefix`. */
export function redisRwLockKeys(name: string, prefix: string = DEFAULT_PREFIX): RedisRwLockKeys {
  const { name: base } = taggedName(name, `${prefix}!rwlock`)
  return {
    line: `${base}:line`,
    fence: `${base}:fence`,
    writers: `${base}:writers`,
    ends: `${base}:ends`,
    grants: `${base}:grants`,
    epoch: `${base}:epoch`,
    changed: `${base}:changed`,
  }
}

/** The keys as every script takes them (KEYS[1..6]; the fence second, where MINT reads it). */
export const scriptKeys = (k: RedisRwLockKeys): string[] => [
  k.line,
  k.fence,
  k.writers,
  k.ends,
  k.grants,
  k.epoch,
]
