/**
 * Where a lock lives on Redis (also each Redlock node): the key names, in one place. The backend and the
 * tests (breaking a lease, reading a fence counter) both use these; nobody copies the format.
 */
import { createHash } from 'node:crypto'

/** The prefix of every key and channel unless the user picks another (`?prefix=`). */
export const DEFAULT_PREFIX = 'fencelock:'

/** The keys of one lock. All share the hash tag `{<key>}`, so they sit in one slot of a Redis Cluster. */
export interface RedisLockKeys {
  /** The owner id, with the lease as its PX expiry. */
  readonly lock: string
  /** The last fence minted (scripts.ts MINT), kept for an hour after it. */
  readonly fence: string
  /** Fair mode: the waiters' owner ids in arrival order. */
  readonly queue: string
  /** Fair mode: each waiter's liveness deadline. */
  readonly waiters: string
  /** Fair mode: each waiter's ttl, for the hand-over. */
  readonly ttls: string
  /** The holder's description (`inspect`), written and deleted with the lock. */
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
  // A brace in the key would end the hash tag early; hash such keys so lock and fence share a slot.
  const tag = /[{}]/.test(key) ? `#${createHash('sha256').update(key).digest('hex')}` : key
  const lock = `${prefix}{${tag}}`
  return {
    lock,
    fence: `${lock}:fence`,
    queue: `${lock}:queue`,
    waiters: `${lock}:waiters`,
    ttls: `${lock}:ttls`,
    holder: `${lock}:holder`,
    starving: `${lock}:starving`,
    channel: `${lock}:released`,
    ...(tag === key ? {} : { name: `${lock}:name` }),
  }
}

/** The Cluster slot of a key name: CRC16 (XMODEM) of its hash tag, or of the whole name without one. */
export function slotOf(name: string): number {
  const open = name.indexOf('{')
  const close = open < 0 ? -1 : name.indexOf('}', open + 1)
  const hashed = close > open + 1 ? name.slice(open + 1, close) : name
  let crc = 0
  for (const byte of Buffer.from(hashed)) {
    crc ^= byte << 8
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc % 16_384
}
