/**
 * Where a lock lives on Redis (also each Redlock node): the key names of the mutex, in one place. The
 * backend and the tests (breaking a lease, reading a fence counter) both use these; nobody copies the format.
 */
import { DEFAULT_PREFIX, taggedName } from '../keys.js'

/** The keys of one lock. All share the hash tag `{<key>}`, so they sit in one slot of a Redis Cluster. */
export interface RedisLockKeys {
  /** The owner id, with the lease as its PX expiry; in plain mode "<owner> <description>". */
  readonly lock: string
  /** The last fence minted (scripts.ts MINT), kept for an hour after it. */
  readonly fence: string
  /** Fair mode: the waiters' owner ids in arrival order. */
  readonly queue: string
  /** Fair mode: each waiter's liveness deadline. */
  readonly waiters: string
  /** Fair mode: each waiter's ttl, for the hand-over. */
  readonly ttls: string
  /**
   * The holder's description (`inspect`), written and deleted with the lock, where the lock key holds the
   * owner id alone (fair mode, Redlock's nodes, plain grants of earlier versions).
   */
  readonly holder: string
  /** Plain mode: the one waiter refused for too long, which a free lock goes to (scripts.ts ACQUIRE). */
  readonly starving: string
  /** Published to on release (and fair hand-over). */
  readonly channel: string
  /**
   * Only for a key with a brace, whose tag is a hash: the key itself, which each grant records (for as
   * long as the fence key) so that `list` can name the lock.
   */
  readonly name?: string
}

/** The name key of `k` where it has one, as the scripts take it: an optional last KEYS entry. */
export const named = (k: RedisLockKeys): string[] => (k.name === undefined ? [] : [k.name])

/** `key` where `k` has a name key, as the scripts take it: an optional last ARGV entry. */
export const nameOf = (k: RedisLockKeys, key: string): string[] => (k.name === undefined ? [] : [key])

/** The keys of the lock named `key` under `prefix`. */
export function redisLockKeys(key: string, prefix: string = DEFAULT_PREFIX): RedisLockKeys {
  const { name: lock, hashed } = taggedName(key, prefix)
  return {
    lock,
    fence: `${lock}:fence`,
    queue: `${lock}:queue`,
    waiters: `${lock}:waiters`,
    ttls: `${lock}:ttls`,
    holder: `${lock}:holder`,
    starving: `${lock}:starving`,
    channel: `${lock}:released`,
    ...(hashed ? { name: `${lock}:name` } : {}),
  }
}

/**
 * The lock keys under one backend's prefix. The keys of the key used last are kept: a lock is usually
 * acquired and released by name, again and again.
 */
export class LockLayout {
  #last: RedisLockKeys | undefined
  #lastKey: string | undefined

  constructor(readonly prefix: string) {}

  keysOf(key: string): RedisLockKeys {
    if (key !== this.#lastKey || !this.#last) {
      this.#last = redisLockKeys(key, this.prefix)
      this.#lastKey = key
    }
    return this.#last
  }
}
