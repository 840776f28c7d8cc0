/**
 * Finding the locks under a prefix on one Redis server (also each Redlock node): the SCAN pattern of the
 * lock keys (its pages come from ../scan.ts), and the user's key back from a lock key's name (layout.ts).
 */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../../core/abort.js'
import { redisLockKeys } from './layout.js'

/** A tag that ../keys.ts hashed (the key had a brace): `#` and the key's SHA-256 in hex. */
const HASHED_TAG = /^#[0-9a-f]{64}$/

/** The lock keys under a store prefix: the SCAN pattern, and the user's key from a key name. */
export interface LockKeyMatch {
  /** A glob of every lock key `<prefix>{<tag>}` (and nothing of a lock's other keys, which end otherwise). */
  readonly pattern: string
  /**
   * The tag of a lock key's name, `undefined` for any other name; `hashed` when it is a hash (a key with a
   * brace), whose key only its recorded name tells (`keysOf`).
   */
  keyOf(name: string): { readonly key: string; readonly hashed: boolean } | undefined
}

/** A lock found by a scan: the user's key, and a note when its key could not be told. */
export interface FoundLock {
  readonly key: string
  readonly note?: string
}

/**
 * The locks named `names` (one SCAN step) whose user keys start with `prefix`. A hashed tag's key is the
 * name its grant recorded (layout.ts `name`; one GET each, only for such keys); without one (a grant older
 * than the record) the lock is found under its tag, a key that reaches the same lock.
 */
export async function keysOf(
  server: Redis,
  match: LockKeyMatch,
  storePrefix: string,
  names: readonly string[],
  prefix: string,
  signal: AbortSignal,
): Promise<FoundLock[]> {
  const found = await Promise.all(
    names.map(async (name): Promise<FoundLock | undefined> => {
      const at = match.keyOf(name)
      if (!at?.hashed) return at
      const recorded = await raceSignal(server.get(`${name}:name`), signal)
      if (recorded !== null && redisLockKeys(recorded, storePrefix).lock === name) return { key: recorded }
      return {
        key: at.key,
        note: `the name of this lock (it has a brace) was not recorded: ${at.key} reaches it`,
      }
    }),
  )
  return found.filter((lock): lock is FoundLock => lock?.key.startsWith(prefix) === true)
}

/** The lock keys under `prefix` (the store's own prefix option, not the user's list prefix). */
export function lockKeyMatch(prefix: string): LockKeyMatch {
  const glob = prefix.replace(/[*?[\]\\]/g, '\\$&')
  return {
    pattern: `${glob}{*}`,
    keyOf(name) {
      if (!name.startsWith(`${prefix}{`) || !name.endsWith('}')) return undefined
      const tag = name.slice(prefix.length + 1, -1)
      // A tag never holds a brace (../keys.ts hashes such keys): anything else is not one of our lock keys.
      if (/[{}]/.test(tag)) return undefined
      return { key: tag, hashed: HASHED_TAG.test(tag) }
    },
  }
}
