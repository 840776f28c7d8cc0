/**
 * The etcd backend: etcd's own lock recipe (Go's `concurrency.Mutex`, which `etcdctl lock` also uses), so
 * a Go service and a fencelock client on the same prefix exclude each other. It is an adapter for two
 * engines: the queue-lock engine (src/engines/queue/engine.ts: acquire, wait in line, extend, release,
 * abandon) and the session engine (src/engines/session/pool.ts: leases kept alive, pooled per lease length).
 *
 * - Layout: a lock named `k` is the set of keys under `<prefix>k/` (`/` and `%` in `k` escaped, see
 *   layout.ts), one per acquire: `<prefix>k/<lease hex>-<owner>`, its value the owner id (and the holder's
 *   description), attached to a session's lease. The key with the lowest create revision holds the lock;
 *   the others wait in that order (FIFO). Acquire is one transaction: if our key does not exist, put it
 *   and read the two newest keys of the prefix by create revision (ours, and the one before it, which a
 *   waiter watches; none: ours is first); else read our key and the first. A retry of an acquire already
 *   in line is a read alone. Two raft writes per acquisition (the put, the release's delete), none more
 *   for a hand-over (test/backends/etcd/requests.test.ts).
 * - Expiry: a lease per lease length (whole seconds), kept alive while a lock, a waiter or an attempt may
 *   have a key on it, revoked after a while without. A dead holder's key goes with its lease. Validity
 *   never exceeds what etcd keeps: a grant or an extension reports the lease its session is known to keep
 *   (the last acknowledged keep-alive plus its TTL) from the attempt's start. `extend` to a longer ttl moves
 *   our key to the session of that ttl; to a shorter one it stays on the longer lease (a move whose reply
 *   is lost would leave the key on the shorter lease while the core still counts the longer). Loss is
 *   noticed when etcd knows it: a holder watches its own key from its creation, and a delete (by anyone, or
 *   by its lease being revoked or expiring) aborts the grant's `lost` signal within about a round trip; so
 *   does etcd3 reporting the session's lease gone. The watch is made with the grant but never waited for
 *   (the acquire costs no extra round trip), and cancelled on release, loss and close.
 * - Fence: the create revision of our key. etcd's revision is global and never goes back, also across
 *   leader changes. A put on an existing key keeps its create revision, so moving our key to another lease
 *   keeps both the fence and the place in line.
 * - Waiting: watches only the key just before ours (the one the acquire read; on the one watcher this
 *   client keeps on the lock's line, shared by its waiters, see queue-watch.ts), from the current revision
 *   (then reads it, in case it went away before the watch began, and again once per recheck interval, the
 *   fallback for a watch gone silent: the acquire loop's polls meanwhile are answered by it), then
 *   re-checks that no earlier key remains and that ours still exists (a waiter whose lease died while it
 *   waited must not be granted: Jepsen's etcd #11456). The re-check after a wake-up is a serializable
 *   read, read again linearizably if the member is behind: a hand-over waits for the release's delete and
 *   that one member-local read.
 *   Abandon deletes our key by its name (unique to the acquire: nobody else writes a key with our owner id)
 *   once the attempt's transaction has settled, whatever the abort raced with: the write, its reply, the
 *   keep-alive after it, or a hand-over. A clean-up or release whose delete fails retires the session, so
 *   the key cannot outlive the locks still on that lease, and the delete is sent again (owner-checked, by
 *   the key's create revision, or by its unique name) until etcd answers: this client's own waiters queued
 *   behind the key would otherwise keep the session alive, and the key with it.
 * - Limits: keys up to 32 KiB and ttls up to 24.8 days (see ETCD_LIMITS). The client `fromUrl` makes
 *   (`etcdClientOptions`) keeps one request's error from failing the others (faults.ts).
 *
 * - Semaphores: a line of keys under `<prefix>%semaphore/<name>/` with the limit beside them, on the queue
 *   engine's semaphore (semaphore.ts has the layout).
 * - Read-write locks: Go's `recipe.RWMutex` layout under `<prefix>%rwlock/<name>/`, on the queue engine's
 *   read-write lock (rwlock.ts has the layout and the downgrade).
 *
 * - Operations: `list` ranges over the prefix a page of keys at a time, keeping each lock's first key;
 *   `break` deletes the holder's key conditioned on its create revision (operations.ts).
 *
 * Files: queue.ts (the queue-lock adapter: transactions and watches on a lock's prefix), queue-watch.ts
 * (the waits' watches: one watcher per lock's line and client), leases.ts (the
 * session adapter: etcd leases and etcd3's keep-alive events), layout.ts (key names, shared with the
 * tests), operations.ts (inspect, list, break), semaphore.ts (counting semaphores), rwlock.ts (read-write locks), faults.ts (etcd3 client options and error words).
 */
import type { Etcd3, IOptions } from 'etcd3'
import { raceSignal } from '../../core/abort.js'
import type { BackendLimits, DoctorFinding, LockBackend } from '../../core/backend.js'
import { BackendUnavailableError, quoteKey } from '../../core/errors.js'
import { hostsOf, loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { queueLockBackend } from '../../engines/queue/backend.js'
import { etcdElection } from './election.js'
import { describeFailure, etcdClientOptions } from './faults.js'
import { DEFAULT_PREFIX, prefixEnd } from './layout.js'
import { EtcdLeases } from './leases.js'
import { breakLock, inspectLock, listLocks } from './operations.js'
import { EtcdQueue } from './queue.js'
import { etcdRwLock } from './rwlock.js'
import { etcdSemaphore } from './semaphore.js'

export { type Etcd3Module, etcdClientOptions } from './faults.js'

/** What `etcdBackend` is told. */
export interface EtcdBackendOptions {
  /**
   * An `Etcd3` client of the `etcd3` package. fencelock never closes it. Build it with `etcdClientOptions`, or
   * etcd3's default fault handling lets one failing request (an oversized key) stop every lock on it.
   */
  readonly client: Etcd3
  /** Prefix of every key fencelock writes. A lock named `k` lives under `<prefix>k/`. @default 'fencelock/' */
  readonly prefix?: string | undefined
  /** Names the store in errors. */
  readonly id?: string | undefined
}

/**
 * What etcd can hold for us.
 * - Keys up to 32 KiB: the acquire transaction carries our key three times and the lock's prefix four
 *   times, and escaping can triple a key (`/` is written `%2F`), so 32 KiB makes at most ~700 KB, under
 *   etcd's default request limit (`--max-request-bytes`, 1.5 MiB) with room to spare. A larger key is
 *   refused by the core before any I/O, not by etcd after a round trip.
 * - Leases up to 2,147,483 s (24.8 days): etcd accepts 9,000,000,000 s, but etcd3 times its keep-alive
 *   stream with `setTimeout(ttl × 1000)`, and Node fires a longer timer after 1 ms: a longer lease would
 *   make etcd3 tear down and reopen its keep-alive stream in a loop.
 */
export const ETCD_LIMITS: BackendLimits = { maxKeyBytes: 32 * 1024, maxTtlMs: 2_147_483 * 1000 }

/**
 * Creates an etcd backend over your `Etcd3` client.
 * @example
 * import * as etcd3 from 'etcd3'
 * const client = new etcd3.Etcd3(etcdClientOptions(etcd3, { hosts: 'http://127.0.0.1:2379' }))
 * const locks = createLockClient(etcdBackend({ client }))
 */
export function etcdBackend(options: EtcdBackendOptions): LockBackend {
  return etcdBackendOf(options, false)
}

/**
 * The backend: the queue-lock engine over etcd's lock queues and elections (src/engines/queue/backend.ts),
 * with etcd's own reads and its failures said in words. `owned`: we made the client (from a URL), and so
 * close it.
 */
function etcdBackendOf(options: EtcdBackendOptions, owned: boolean): LockBackend {
  const { client } = options
  if (!client || typeof client.lease !== 'function') {
    throw new TypeError('Expected `client` to be an Etcd3 instance of the etcd3 package')
  }
  const prefix = options.prefix ?? DEFAULT_PREFIX
  const id = options.id ?? 'etcd'
  const unavailable = (
    key: string,
    what: string,
    error: unknown,
    subject: 'lock' | 'election' | 'semaphore' | 'read-write lock',
  ) => {
    if (error instanceof BackendUnavailableError) return error
    const { text, retryable } = describeFailure(error)
    return new BackendUnavailableError(`Could not ${what} ${subject} ${quoteKey(key)} on ${id}: ${text}`, {
      key,
      backend: id,
      cause: error,
      retryable,
    })
  }
  const backend = queueLockBackend(
    {
      id,
      limits: ETCD_LIMITS,
      unavailable,
      inspect: (key, signal) => inspectLock(client, prefix, key, signal),
      list: (under, signal) => listLocks(client, prefix, under, signal),
      breakLock: (key, breakOptions) => breakLock(client, prefix, key, breakOptions),
      doctor: (signal) => doctor(client, prefix, signal),
      close: async () => {
        if (owned) client.close()
      },
    },
    { queue: new EtcdQueue(client, prefix), leases: new EtcdLeases(client) },
    etcdElection(client, prefix, (key, what, error) => unavailable(key, what, error, 'election')),
    etcdSemaphore(client, prefix, (key, what, error) => unavailable(key, what, error, 'semaphore')),
  )
  const rwlock = etcdRwLock(
    client,
    prefix,
    { id, capabilities: backend.capabilities, limits: ETCD_LIMITS },
    (key, what, error) => unavailable(key, what, error, 'read-write lock'),
  )
  return {
    ...backend,
    rwlock: rwlock.facet,
    close: async () => {
      // Both engines revoke their own leases; the backend's close then closes the client if it is ours.
      await rwlock.close()
      await backend.close()
    },
  }
}

/** `fencelock doctor`: the cluster's version and leader, and how many keys fencelock keeps now. */
async function doctor(client: Etcd3, prefix: string, signal: AbortSignal): Promise<DoctorFinding[]> {
  const status = await raceSignal(client.maintenance.status(), signal)
  // Keys live only while held or waited for (each is bound to its session's lease): a count, no listing.
  const under = Buffer.from(prefix)
  const { count } = await raceSignal(
    client.kv.range({ key: under, range_end: prefixEnd(prefix), count_only: true }),
    signal,
  )
  return [
    {
      level: 'info',
      message: `etcd ${status.version}, leader ${status.leader}, raft term ${status.raftTerm}`,
    },
    {
      level: 'info',
      message: `keys under "${prefix}": ${count} (one per holder and waiter; a released or expired lock keeps none)`,
    },
  ]
}

/** etcd:// takes no URL parameters (tested against its page in docs/backends/, like the others). */
export const PARAMS = {} as const satisfies ParamSchema

/** `etcd://host1:2379,host2:2379[/prefix]` — the path (if any) replaces the default prefix `fencelock/`. */
export async function fromUrl(url: URL): Promise<LockBackend> {
  // etcd3 would take "http://:2379" and fail each request after its dial timeout: say it now.
  if (hostsOf(url).some((h) => h === '')) {
    throw new TypeError(
      `Expected at least one host in ${redact(url)}, as in etcd://127.0.0.1:2379 or etcd://h1:2379,h2:2379/app/`,
    )
  }
  const etcd3 = await loadDriver('etcd3', 'etcd', url, () => import('etcd3'))
  readParams(url, PARAMS)
  const path = decodeURIComponent(url.pathname.replace(/^\//, ''))
  const hosts = hostsOf(url).map((h) => `http://${h.includes(':') ? h : `${h}:2379`}`)
  const options: IOptions = {
    hosts,
    ...(url.username
      ? { auth: { username: decodeURIComponent(url.username), password: decodeURIComponent(url.password) } }
      : {}),
  }
  const client = new etcd3.Etcd3(etcdClientOptions(etcd3, options))
  return etcdBackendOf(
    { client, ...(path ? { prefix: path.endsWith('/') ? path : `${path}/` } : {}), id: redact(url) },
    true,
  )
}
