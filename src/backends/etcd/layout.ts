/**
 * Where a lock lives on etcd, in one place: the backend and the tests (breaking a lease, listing a lock's
 * queue) both use these; nobody copies the escaping.
 */

/** The prefix of every key unless the user picks another (the URL's path). */
export const DEFAULT_PREFIX = 'fencelock/'

/** A lock name as one path segment: '/' and '%' escaped, so `a` never sees the waiters of `a/b`. */
export const segment = (key: string): string => key.replace(/%/g, '%25').replace(/\//g, '%2F')

/** The lock name of an escaped segment, or undefined for a segment `segment` does not make. */
export function unsegment(escaped: string): string | undefined {
  const key = escaped.replace(/%(25|2F)/g, (found) => (found === '%25' ? '%' : '/'))
  return segment(key) === escaped ? key : undefined
}

/**
 * The prefix under which the lock named `key` keeps its queue: one key per acquire,
 * `<lock prefix><lease hex>-<owner>`, the one with the lowest create revision holding the lock.
 */
export const lockPrefix = (key: string, prefix: string = DEFAULT_PREFIX): string =>
  `${prefix}${segment(key)}/`

/**
 * The prefix under which elections live, apart from every lock: `<prefix>%election/`. No lock's segment
 * starts with `%e` (the escaping writes `%` only as `%25` or `%2F`), so no lock name reaches it, and a lock
 * `x` and an election `x` are independent, as on every backend.
 */
export const electionsPrefix = (prefix: string = DEFAULT_PREFIX): string => `${prefix}%election/`

/**
 * The prefix of the election named `name`: Go's `concurrency.NewElection(session, pfx)` and
 * `etcdctl elect pfx` use `pfx + '/'`, so this without its last `/` is the name they take.
 */
export const electionPrefix = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  lockPrefix(name, electionsPrefix(prefix))

/**
 * The prefix under which semaphores live, apart from every lock and election: `<prefix>%semaphore/` (no
 * lock's segment starts with `%s`, as for elections).
 */
export const semaphoresPrefix = (prefix: string = DEFAULT_PREFIX): string => `${prefix}%semaphore/`

/**
 * The prefix of the semaphore named `name`: its limit key (`semaphoreLimitKey`) and its entries, one per
 * acquire, `<lease hex>-<owner>` on the acquire's session lease, valued with the permits.
 */
export const semaphorePrefix = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  lockPrefix(name, semaphoresPrefix(prefix))

/**
 * The key holding a semaphore's limit, `<semaphore prefix>%limit`. `%` sorts before every hex digit, so the
 * entries (whose names start with one) are exactly the keys from `entriesStart` on.
 */
export const semaphoreLimitKey = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  `${semaphorePrefix(name, prefix)}%limit`

/** The first key of a semaphore's entries, under its prefix `line` (`semaphorePrefix`). */
export const entriesStart = (line: string): string => `${line}0`

/** The first key after every key with `prefix` (etcd's range_end for a prefix). */
export function prefixEnd(prefix: string): Buffer {
  const end = Buffer.from(prefix)
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++
      return end.subarray(0, i + 1)
    }
  }
  return Buffer.from([0])
}

/**
 * The prefix of the read-write lock named `name`, apart from every lock, election and semaphore:
 * `<prefix>%rwlock/<name escaped>/`. Without its last `/` it is the prefix Go's `recipe.NewRWMutex(session,
 * pfx)` takes: its readers' keys are `<pfx>/read/…`, its writers' `<pfx>/write/…`, as ours.
 */
export const rwlockPrefix = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  lockPrefix(name, `${prefix}%rwlock/`)

/** Where a read-write lock's entries of each mode live, under its prefix (Go's `RWMutex` names). */
export const READERS = 'read/'
export const WRITERS = 'write/'

/**
 * The prefix of the gates of the read-write lock whose prefix is `line` (`rwlockPrefix`): `%rwgate` in
 * place of `%rwlock`, outside the lock's prefix, so Go's `RWMutex` never reads them. A fencelock writer's
 * entry `<line>write/<id>` has the gate `<gates>/<id>` (rwlock.ts says why).
 */
export const gatesOf = (line: string, prefix: string = DEFAULT_PREFIX): string =>
  `${prefix}%rwgate/${line.slice(`${prefix}%rwlock/`.length)}`
