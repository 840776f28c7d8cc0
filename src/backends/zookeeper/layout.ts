/**
 * Where a lock lives on ZooKeeper, in one place: the backend and the tests (breaking a lease, listing a
 * lock's queue) use these; nobody copies the escaping or the naming.
 *
 * The layout is Apache Curator's `InterProcessMutex` on the path `<prefix>/<key>` (checked against Curator
 * 5.4: `StandardLockInternalsDriver`, `ProtectedUtils`, `LockInternals`): one child per acquire, created
 * EPHEMERAL_SEQUENTIAL in protected mode, `_c_<36-character id>-lock-<10-digit sequence>`; children are
 * ordered by what follows the last `lock-` (Curator's `fixForSorting`: the zero-padded sequence, so the
 * string order is the creation order); the first holds the lock, each other waits for the one before it.
 */
import { createHash } from 'node:crypto'

/** The parent of every lock unless the user picks another (the URL's path). */
export const DEFAULT_PREFIX = '/fencelock'

/** Curator's `InterProcessMutex` lock name (`LOCK_NAME`), the part before each child's sequence number. */
export const LOCK_NAME = 'lock-'

/** Curator's `LeaderLatch` name (`LOCK_NAME` there), the part before each candidate's sequence number. */
export const LATCH_NAME = 'latch-'

/** Curator's protected-mode prefix (`ProtectedUtils.PROTECTED_PREFIX`). */
const PROTECTED_PREFIX = '_c_'

/**
 * Characters ZooKeeper refuses in a path (`PathUtils.validatePath`): NUL, the C0 and C1 controls, DEL, the
 * UTF-16 surrogates and private use area (U+D800-U+F8FF), and U+FFF0-U+FFFF. Astral characters (an emoji)
 * are surrogate pairs in Java's strings: refused too.
 */
function refused(ch: string): boolean {
  const code = ch.charCodeAt(0)
  return (
    code <= 0x1f || (code >= 0x7f && code <= 0x9f) || (code >= 0xd800 && code <= 0xf8ff) || code >= 0xfff0
  )
}

/** ZooKeeper's own subtree (quotas, configuration): the server refuses or misreads nodes under it. */
const RESERVED = '/zookeeper'

/**
 * Checks a prefix (absolute, without a trailing '/') against what ZooKeeper accepts as a path, so that a
 * bad one is a TypeError at the call, not a server refusal retried as an outage.
 * @throws {TypeError} naming the prefix and what is wrong with it
 */
export function checkPrefix(prefix: string): void {
  const segments = prefix === '/' ? [] : prefix.slice(1).split('/')
  const bad = [...prefix].find(refused)
  const problem = segments.includes('')
    ? 'an empty segment ("//")'
    : segments.some((s) => s === '.' || s === '..')
      ? 'a "." or ".." segment'
      : bad !== undefined
        ? `the character U+${bad.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}, which ZooKeeper refuses in a path`
        : prefix === RESERVED || prefix.startsWith(`${RESERVED}/`)
          ? `a place under ${RESERVED}, which ZooKeeper reserves for itself`
          : undefined
  if (problem !== undefined) {
    throw new TypeError(
      `Expected the ZooKeeper prefix to be a path like ${DEFAULT_PREFIX} or /app/locks, got ${JSON.stringify(prefix)}: ` +
        `it has ${problem}`,
    )
  }
}

/**
 * A lock name as one path segment: `%`, `/` and every character ZooKeeper refuses written as `%XX` (the
 * UTF-8 bytes; a lone surrogate as `%uXXXX`), so no key can reach outside its own node (`a` never sees
 * the waiters of `a/b`) and no key is refused. The names ZooKeeper reserves as segments are escaped too:
 * the empty key is `%`, `.` and `..` are `%2E` and `%2E%2E`. Distinct keys stay distinct: every `%` the
 * result contains was written by the escaping.
 */
export function segment(key: string): string {
  if (key === '') return '%'
  if (key === '.' || key === '..') return key.replace(/\./g, '%2E')
  let out = ''
  for (const ch of key) {
    if (ch === '%' || ch === '/' || refused(ch)) {
      const code = ch.codePointAt(0)!
      if (ch.length === 1 && code >= 0xd800 && code <= 0xdfff) out += `%u${code.toString(16).toUpperCase()}`
      else
        for (const byte of Buffer.from(ch, 'utf8'))
          out += `%${byte.toString(16).toUpperCase().padStart(2, '0')}`
    } else out += ch
  }
  return out
}

/**
 * The lock name of a node `segment` made, or undefined for a name it does not make (a foreign node, such
 * as a Curator lock path with a bare `%`): decoding and escaping again must give the name back.
 */
export function unsegment(escaped: string): string | undefined {
  if (escaped === '%') return ''
  const key = escaped.replace(/%u[0-9A-F]{4}|(?:%[0-9A-F]{2})+/g, (run) =>
    run.startsWith('%u')
      ? String.fromCharCode(Number.parseInt(run.slice(2), 16))
      : Buffer.from(run.replace(/%/g, ''), 'hex').toString('utf8'),
  )
  return segment(key) === escaped ? key : undefined
}

/**
 * The node of the election named `name`: `<prefix>/%election/<name escaped>`, apart from every lock (no
 * lock's segment is `%election`: the escaping writes `%` as `%25`), so a lock `x` and an election `x` are
 * independent. Curator's `LeaderLatch` on this path is a candidate of the same election.
 */
export const electionPath = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  `${prefix === '/' ? '' : prefix}/%election/${segment(name)}`

/**
 * The node of the semaphore named `name`: `<prefix>/%semaphore/<name escaped>` (Curator's
 * `InterProcessSemaphoreV2` path), apart from every lock and election. Its `leases` child holds the leases
 * (`semaphoreLeases`); Curator's admission mutex is its `locks` child, which fencelock does not use.
 */
export const semaphorePath = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  `${prefix === '/' ? '' : prefix}/%semaphore/${segment(name)}`

/** The node whose children are the leases of the semaphore named `name` (Curator's `<path>/leases`). */
export const semaphoreLeases = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  `${semaphorePath(name, prefix)}/leases`

/** Curator's `InterProcessSemaphoreV2` lease name (`LEASE_BASE_NAME`), before each lease's sequence number. */
export const LEASE_NAME = 'lease-'

/**
 * The word before a lease's sequence number for `permits` permits: Curator's `lease-` for one, `<k>-lease-`
 * for k, so the name says how many permits the lease holds (Curator counts every lease as one).
 */
export const leaseName = (permits: number): string =>
  permits === 1 ? LEASE_NAME : `${permits}-${LEASE_NAME}`

/** The permits a lease holds, from its name (`leaseName`); 1 for any other (Curator's own leases). */
export function permitsOf(child: string): number {
  const match = /^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-([1-9][0-9]*)-lease-/.exec(
    child,
  )
  return match ? Number(match[1]) : 1
}

/** The data of a semaphore's `leases` node: its stored limit. */
export const limitData = (limit: number): Buffer => Buffer.from(`limit ${limit}`, 'utf8')

/** The limit stored in a `leases` node's data (`limitData`), or undefined (none, or Curator's empty node). */
export function limitOf(data: Buffer): number | undefined {
  const match = /^limit ([1-9][0-9]*)$/.exec(data.toString('utf8'))
  return match ? Number(match[1]) : undefined
}

/**
 * The node of the read-write lock named `name`: `<prefix>/%rwlock/<name escaped>`, apart from every lock,
 * election and semaphore. Curator's `InterProcessReadWriteLock` on this path is in the same line.
 */
export const rwlockPath = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  `${prefix === '/' ? '' : prefix}/%rwlock/${segment(name)}`

/** Curator's `InterProcessReadWriteLock` reader's name (`READ_LOCK_NAME`), before its sequence number. */
export const READ_NAME = '__READ__'

/** Curator's `InterProcessReadWriteLock` writer's name (`WRITE_LOCK_NAME`), before its sequence number. */
export const WRITE_NAME = '__WRIT__'

/** Whether a read-write lock's child is a writer's by its name (Curator's `node.contains(WRITE_LOCK_NAME)`). */
export const isWriterNode = (child: string): boolean => child.includes(WRITE_NAME)

/**
 * A read-write lock's children in line order (Curator's `SortingLockInternalsDriver`: the sequence after
 * `__READ__` or `__WRIT__`, one counter for both, as both are children of one node).
 */
export function rwLine(names: readonly string[]): string[] {
  const key = (child: string) => sortKey(sortKey(child, READ_NAME), WRITE_NAME)
  return [...names].sort((a, b) => {
    const x = key(a)
    const y = key(b)
    return x < y ? -1 : x > y ? 1 : 0
  })
}

/** The node of the lock named `key`, whose children are its queue (Curator's lock path). */
export const lockPath = (key: string, prefix: string = DEFAULT_PREFIX): string =>
  `${prefix === '/' ? '' : prefix}/${segment(key)}`

/**
 * The 36-character protected id of an acquire: our owner id (128 random bits as 32 hex digits) in a
 * UUID's shape, as Curator's own ids are; any other owner string is hashed to one.
 */
export function protectedId(owner: string): string {
  const hex = /^[0-9a-f]{32}$/.test(owner)
    ? owner
    : createHash('sha256').update(owner).digest('hex').slice(0, 32)
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

/**
 * The name of our child before ZooKeeper appends its sequence number: `_c_<id>-lock-` (Curator's
 * `withProtection()` on `<lock path>/lock-`). Only this acquire writes children that start with it.
 */
export const protectedName = (owner: string, name: string = LOCK_NAME): string =>
  `${PROTECTED_PREFIX}${protectedId(owner)}-${name}`

/** The owner id in a protected name made by `protectedName` (its UUID's hex digits), else undefined. */
export function ownerOfProtected(child: string): string | undefined {
  const match = /^_c_([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})-/.exec(child)
  return match ? match.slice(1).join('') : undefined
}

/**
 * What a child is ordered by (Curator's `standardFixForSorting`): the text after its last `lock-` (or
 * `latch-`, an election's).
 */
export function sortKey(child: string, name: string = LOCK_NAME): string {
  const at = child.lastIndexOf(name)
  return at < 0 ? child : child.slice(at + name.length)
}

/** A lock's children in line order (Curator's `getSortedChildren`): the first holds the lock. */
export function inLine(names: readonly string[], name: string = LOCK_NAME): string[] {
  return [...names].sort((a, b) => {
    const x = sortKey(a, name)
    const y = sortKey(b, name)
    return x < y ? -1 : x > y ? 1 : 0
  })
}

/**
 * The data of our child: the entry's value ("<owner> <holder>": a holder has no control characters, so
 * no newline) and the timeout its session negotiated, which no other client can read over the protocol.
 */
export const entryData = (value: string, sessionTimeoutMs: number): Buffer =>
  Buffer.from(`${value}\nsession timeout ${sessionTimeoutMs} ms`, 'utf8')

/** The start of an election node's data once a leader proclaimed; the leader's term follows it. */
const PROCLAIMED = 'proclaimed by term '

/**
 * The election node's data after a proclaim: the value, tagged with the proclaiming leader's term (its
 * child's czxid), so that no reader takes it for another leader's value.
 */
export const proclaimedData = (term: bigint, value: string): Buffer =>
  Buffer.from(`${PROCLAIMED}${term}\n${value}`, 'utf8')

/** The value proclaimed by the leader of term `term`, if the election node's data holds one; else undefined. */
export function proclaimedValue(data: Buffer, term: bigint): string | undefined {
  const text = data.toString('utf8')
  const tag = `${PROCLAIMED}${term}\n`
  return text.startsWith(tag) ? text.slice(tag.length) : undefined
}
