/**
 * The ZooKeeper backend: Apache Curator's `InterProcessMutex` recipe on the same nodes, so a Java service
 * using Curator and a fencelock client on the same lock path exclude each other. It is an adapter for two
 * engines: the queue-lock engine (src/engines/queue/engine.ts: acquire, wait in line, extend, release,
 * abandon) and the session engine (src/engines/session/pool.ts: sessions kept alive, pooled per lease length).
 *
 * - Layout (layout.ts): a lock named `k` is the node `<prefix>/<k escaped>` (`/`, `%` and the characters
 *   ZooKeeper refuses written `%XX`; default prefix `/fencelock`); each acquire adds one child, created
 *   EPHEMERAL_SEQUENTIAL in Curator's protected mode: `_c_<owner id as a UUID>-lock-<10-digit sequence>`,
 *   its data `<owner id> <holder description>`, then a line `session timeout <ms> ms` (the timeout its
 *   session negotiated, for `inspect` from any client: the protocol does not tell another session's)
 *   (Curator writes its host's IP address; neither side reads the other's data). The child first by the sequence after `lock-` holds the lock; the others wait in
 *   that order (FIFO). Acquire is a create pipelined with a listing of the children (one round trip), then
 *   an `exists` of our child for its czxid, which also sets the watch a holder keeps on its child: 3
 *   requests in 2 round trips, no keep-alive beside them (the create's answer counts as one); release is 1.
 *   A retry after a lost reply lists the children first and finds our protected name (only this acquire
 *   writes it). Missing parents are created persistent (no container
 *   nodes with this client's 3.4 protocol), and created again if they vanish before our create.
 * - Expiry: the session is the lease. From a URL, each lease length is a session of its own, asking the
 *   lock's ttl in whole seconds (or `sessionTimeout`) as its timeout; the server clamps it (2 to 20 ticks unless
 *   configured), and a grant's validity never exceeds what it negotiated, counted from what the leader can
 *   have seen (evidence.ts: a follower answers reads alone, even cut off from the leader; only writes the
 *   leader orders count, each proving an earlier one's send time). A ttl above the server's maximum is
 *   capped by it: keep-alives are paced by the timeout negotiated. With your own
 *   client, its one session carries every lock whatever the ttl (every grant's validity is that session's
 *   timeout). A dead holder's child goes when its session expires. A holder watches its own child (`exists`
 *   watch), and its deletion or the session's expiry aborts the grant's `lost` signal at once.
 * - Fence: the czxid of our child (the zxid of the transaction that created it): ZooKeeper's zxids are
 *   global to the ensemble and strictly increase, across leader changes (a new epoch starts above every
 *   earlier zxid) and across a deleted and re-created lock node (whose sequence numbers restart at 0).
 * - Waiting: a data watch on the child just before ours only (Curator's `getData().usingWatcher()`), never a
 *   poll; a wake-up lists the children again and checks that ours is still there (a waiter whose session
 *   expired is never granted). Abandon deletes our children by protected name once the attempt's requests
 *   have settled.
 * - Limits: keys up to 16 KiB (ZOOKEEPER_LIMITS). The node-zookeeper-client speaks ZooKeeper 3.4's protocol:
 *   no container or TTL nodes, so a client deletes the lock nodes it stopped using itself (retire.ts; Curator's
 *   reaper, or a person, may delete empty ones too; we re-create them). Fences come from the ensemble's zxids: an ensemble
 *   whose data is lost (every member's data directory) starts again from zxid 0. The client has no read
 *   timeout: a member that stops answering (paused, partitioned) is not left for another, so the locks of
 *   that connection run out of validity instead of failing over. Sequence numbers are per lock node and
 *   32-bit: after 2^31 acquires of one lock without its node being re-created, Curator's order breaks.
 *
 * - Operations: `list` reads the prefix's children (one reply: ZooKeeper cannot page it), then each lock's
 *   first child; `break` deletes the holder's child at the version read (operations.ts).
 *
 * Files: queue.ts (the queue-lock adapter: children, creates, watches), retire.ts (deleting unused lock
 * nodes), semaphore.ts (counting semaphores, Curator's `InterProcessSemaphoreV2` layout), rwlock.ts
 * (read-write locks, Curator's `InterProcessReadWriteLock` layout), line-read.ts (a line's children with
 * their data, for the semaphore's and read-write lock's `inspect`),
 * semaphore-watch.ts (what a semaphore's waiter watches), sessions.ts (the session adapter: one session per
 * lease length, or your client's), client.ts (node-zookeeper-client's callbacks as
 * promises), evidence.ts (how long the leader keeps a session, from our writes' answers), layout.ts (paths
 * and names, shared with the tests), operations.ts (inspect, list, break), diagnose.ts (what `inspect` and
 * `doctor` say), four-letter.ts (`srvr`).
 */
import { raceSignal } from '../../core/abort.js'
import type { BackendLimits, DoctorFinding, LockBackend } from '../../core/backend.js'
import { parseDuration } from '../../core/durations.js'
import { BackendUnavailableError, causeText, quoteKey } from '../../core/errors.js'
import { hostsOf, loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { queueLockBackend } from '../../engines/queue/backend.js'
import { CODE, children, closeClient, codeOf, stat, type ZkClient } from './client.js'
import { sessionFinding, srvrFinding } from './diagnose.js'
import { zookeeperElection } from './election.js'
import { checkPrefix, DEFAULT_PREFIX } from './layout.js'
import { breakLock, inspectLock, listLocks } from './operations.js'
import { ZkQueue } from './queue.js'
import { zookeeperRwLock } from './rwlock.js'
import { zookeeperSemaphore } from './semaphore.js'
import { type Connect, OwnSessions, SharedSession } from './sessions.js'

export type { ZkClient } from './client.js'

/** What `zookeeperBackend` is told. */
export interface ZooKeeperBackendOptions {
  /**
   * A `Client` of the `node-zookeeper-client` package, connected or connecting. fencelock never closes it.
   * Its one session carries every lock: each grant's validity is its session timeout, whatever the ttl,
   * and its expiry loses every lock on it (make a new client and a new backend then).
   */
  readonly client: ZkClient
  /** The node under which every lock lives (Curator's lock path is `<prefix>/<key>`). @default '/fencelock' */
  readonly prefix?: string | undefined
  /** Names the store in errors. */
  readonly id?: string | undefined
  /**
   * How long a lock node stays after this client's last release of it before the client deletes it (if
   * empty): a duration like `'10s'`, or ms. ZooKeeper then keeps a node per lock in use, not per name ever
   * locked. @default '10s'
   */
  readonly retireAfter?: number | string | undefined
}

/**
 * What ZooKeeper can hold for us: keys up to 16 KiB (escaping can triple one, far under the server's 1 MiB
 * packet limit, `jute.maxbuffer`), sessions up to 2^31-1 ms (the protocol's int; the server clamps to its
 * `maxSessionTimeout` anyway, and the grant counts what it negotiated).
 */
export const ZOOKEEPER_LIMITS: BackendLimits = { maxKeyBytes: 16 * 1024, maxTtlMs: 2 ** 31 - 1 }

/** How long a released lock node stays before its deletion (retire.ts), unless `retireAfter` says. */
const DEFAULT_RETIRE_AFTER_MS = 10_000

/** The session timeout of the connection `inspect` and `doctor` use (from a URL without `sessionTimeout`). */
const READER_TIMEOUT_MS = 30_000

/**
 * Creates a ZooKeeper backend over your node-zookeeper-client `Client`.
 * @example
 * import zookeeper from 'node-zookeeper-client'
 * const client = zookeeper.createClient('127.0.0.1:2181', { sessionTimeout: 15_000 })
 * client.connect()
 * const locks = createLockClient(zookeeperBackend({ client }))
 */
export function zookeeperBackend(options: ZooKeeperBackendOptions): LockBackend {
  const { client } = options
  if (!client || typeof client.getChildren !== 'function' || typeof client.getSessionTimeout !== 'function') {
    throw new TypeError('Expected `client` to be a Client of the node-zookeeper-client package')
  }
  const { retireAfter, ...rest } = options
  return zookeeperBackendOf({
    ...rest,
    shared: client,
    ...(retireAfter === undefined ? {} : { retireAfterMs: parseDuration('retireAfter', retireAfter) }),
  })
}

interface Setup {
  readonly prefix?: string | undefined
  readonly id?: string | undefined
  /** The user's client (one session for everything), or else… */
  readonly shared?: ZkClient
  /** …a way to open our own, with the URL's hosts and fixed session timeout. */
  readonly connect?: Connect
  readonly hosts?: readonly string[]
  readonly sessionTimeoutMs?: number | undefined
  readonly retireAfterMs?: number | undefined
}

/**
 * The backend: the queue-lock engine over ZooKeeper's lock nodes and elections (src/engines/queue/backend.ts),
 * on one set of sessions, with ZooKeeper's own reads and its failures said in words.
 */
function zookeeperBackendOf(setup: Setup): LockBackend {
  const prefix = normalizePrefix(setup.prefix ?? DEFAULT_PREFIX)
  const id = setup.id ?? 'zookeeper'
  const retireAfterMs = setup.retireAfterMs ?? DEFAULT_RETIRE_AFTER_MS
  const leases = setup.shared
    ? new SharedSession(setup.shared)
    : new OwnSessions(setup.connect!, setup.sessionTimeoutMs)
  /** From a URL: our connection for requests outside any lease, made at first use and again after expiry. */
  let reader: ZkClient | undefined
  /** The client for requests outside any lease: yours, or our reader connection (new after an expiry). */
  const client = (): ZkClient => {
    if (setup.shared) return setup.shared
    if (reader?.getState().name === 'EXPIRED') reader = undefined
    reader ??= setup.connect!(setup.sessionTimeoutMs ?? READER_TIMEOUT_MS)
    return reader
  }
  const unavailable = (
    key: string,
    what: string,
    error: unknown,
    subject: 'lock' | 'election' | 'semaphore' | 'read-write lock',
  ) => {
    if (error instanceof BackendUnavailableError) return error
    return new BackendUnavailableError(
      `Could not ${what} ${subject} ${quoteKey(key)} on ${id}: ${describeFailure(error)}`,
      { key, backend: id, cause: error, retryable: true },
    )
  }
  const backend = queueLockBackend(
    {
      id,
      limits: ZOOKEEPER_LIMITS,
      unavailable,
      // The first child in line (operations.ts): its data names the owner and its session timeout.
      inspect: (key, signal) => inspectLock(client(), prefix, key, signal),
      list: (under, signal) => listLocks(client(), prefix, under, signal),
      breakLock: (key, options) => breakLock(client(), prefix, key, options),
      doctor: (signal) => doctor(setup, client, prefix, signal),
      close: async () => {
        // Called once the engines are closed (their sessions' closes delete our nodes): our reader connection.
        if (reader) closeClient(reader)
        reader = undefined
      },
    },
    { queue: new ZkQueue(prefix, retireAfterMs), leases },
    zookeeperElection({ prefix, retireAfterMs, leases, reader: client }, (key, what, error) =>
      unavailable(key, what, error, 'election'),
    ),
  )
  const semaphore = zookeeperSemaphore(
    { id, prefix, retireAfterMs, leases, reader: client },
    { id, capabilities: backend.capabilities, limits: ZOOKEEPER_LIMITS },
    (key, what, error) => unavailable(key, what, error, 'semaphore'),
  )
  const rwlock = zookeeperRwLock(
    { prefix, retireAfterMs, leases, reader: client },
    { id, capabilities: backend.capabilities, limits: ZOOKEEPER_LIMITS },
    (key, what, error) => unavailable(key, what, error, 'read-write lock'),
  )
  return {
    ...backend,
    semaphore: semaphore.facet,
    rwlock: rwlock.facet,
    close: async () => {
      // Its sessions' closes delete our leases; the backend's close then ends the reader connection.
      await Promise.all([semaphore.close(), rwlock.close()])
      await backend.close()
    },
  }
}

/** `fencelock doctor`: each member's `srvr`, the session negotiated, and how many lock nodes are kept. */
async function doctor(
  setup: Setup,
  clientOf: () => ZkClient,
  prefix: string,
  signal: AbortSignal,
): Promise<DoctorFinding[]> {
  const findings: DoctorFinding[] = []
  for (const host of setup.hosts ?? []) findings.push(await srvrFinding(host, signal))
  const client = clientOf()
  // A request answered: the session is established and its timeout negotiated.
  await raceSignal(children(client, '/'), signal)
  const asked = setup.shared ? undefined : (setup.sessionTimeoutMs ?? READER_TIMEOUT_MS)
  findings.push(sessionFinding(asked, client.getSessionTimeout()))
  // One node per lock in use or released in the last retireAfter (retire.ts), and any left behind.
  const node = await raceSignal(stat(client, prefix), signal)
  findings.push({
    level: 'info',
    message: `lock names kept: ${node?.numChildren ?? 0} (nodes under ${prefix}${node ? '' : ', which does not exist yet'})`,
  })
  return findings
}

/** A ZooKeeper error in words. */
function describeFailure(error: unknown): string {
  switch (codeOf(error)) {
    case CODE.CONNECTION_LOSS:
      return 'the connection to ZooKeeper was lost before the reply (the request may have been applied)'
    case CODE.SESSION_EXPIRED:
      return 'the ZooKeeper session expired'
    case CODE.NO_NODE:
      return 'the lock node vanished while we created our child in it (deleted by someone); trying again'
    default:
      return causeText(error)
  }
}

/** `/a/b/` and `a/b` are `/a/b`; `/` stays; a path ZooKeeper would refuse is refused here. */
function normalizePrefix(prefix: string): string {
  if (typeof prefix !== 'string') {
    throw new TypeError(`Expected \`prefix\` to be a string such as ${DEFAULT_PREFIX}, got ${typeof prefix}`)
  }
  const trimmed = prefix.replace(/\/+$/, '')
  const out = trimmed === '' ? '/' : trimmed.startsWith('/') ? trimmed : `/${trimmed}`
  checkPrefix(out)
  return out
}

/** The URL's parameters (tested against its page in docs/backends/, like the others). */
export const PARAMS = {
  sessionTimeout: {
    type: 'duration',
    min: 1,
    doc: 'the session timeout every lock asks for, instead of one session per ttl asking the ttl (the server clamps it)',
  },
  retireAfter: {
    type: 'duration',
    min: 0,
    doc: 'how long a lock node stays after this client last released it before it is deleted, if empty (default 10s)',
  },
} as const satisfies ParamSchema

/**
 * `zookeeper://host1:2181,host2:2181[/prefix][?sessionTimeout=15s]` — the path (if any) replaces the
 * default prefix `/fencelock`; user and password, if given, are sent as a `digest` identity.
 */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const zookeeper = await loadDriver(
    'node-zookeeper-client',
    'zookeeper',
    url,
    () => import('node-zookeeper-client'),
  )
  const { sessionTimeout, retireAfter } = readParams(url, PARAMS)
  const path = decodeURIComponent(url.pathname)
  const hosts = hostsOf(url).map((h) => (/:\d+$/.test(h) ? h : `${h}:2181`))
  const auth = url.username
    ? Buffer.from(`${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`)
    : undefined
  const connect: Connect = (timeoutMs) => {
    // A short pause between rounds over the members (default up to 1 s): a leader kill costs less.
    const client = zookeeper.createClient(hosts.join(','), { sessionTimeout: timeoutMs, spinDelay: 100 })
    if (auth) client.addAuthInfo('digest', auth)
    client.connect()
    return client
  }
  return zookeeperBackendOf({
    ...(path && path !== '/' ? { prefix: path } : {}),
    id: redact(url),
    connect,
    hosts,
    sessionTimeoutMs: sessionTimeout,
    retireAfterMs: retireAfter,
  })
}
