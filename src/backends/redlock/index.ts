/**
 * Redlock: one lock over N independent Redis masters, as the Redlock specification describes it: the
 * quorum engine (src/engines/quorum.ts, which holds the algorithm: rounds, verdicts, clean-up of failed
 * attempts, per-attempt owner ids, the fence write-back) over the single-node Redis backend, whose scripts
 * run unchanged on each node.
 *
 * - Layout: on each node, the Redis backend's keys (redis/layout.ts): `<prefix>{<key>}` = the owner id of
 *   one attempt, `<owner>.<attempt>`, with the lease as PX expiry; `<prefix>{<key>}:fence` = the hold's
 *   fence on that node, with the same expiry. The waiting line (layout.ts, scripts.ts):
 *   `<prefix>{<key>}:line` (waiter -> ticket) and `:alive` (waiter -> liveness deadline), expiring with
 *   their last waiter. A name keeps nothing once its holds and waiters are gone. Per node, for good:
 *   `<prefix>!fence` = the node's fence counter, one for every name; the admission marker
 *   `<prefix>!admitted` = the run_id of the server process that was admitted (or `in-use`: not admitted
 *   yet, in a set in use), and `<prefix>!fresh` = that run_id if a fresh set's bootstrap admitted it
 *   (admission.ts).
 * - Expiry: each node's own clock expires its hold (PX); the lock is free once all but q-1 of the majority's
 *   holds have expired. Validity is counted by the core from before the first request, less the drift.
 * - Fence: each node mints from its own counter, one for every name (so a name's next grant mints more
 *   than its last one however long ago, with nothing kept per name); the token is the largest value M of
 *   the granting majority, written back to the majority's nodes that were behind before the grant counts,
 *   so any later majority (which shares a node with this one) mints more; the node index in the low 8 bits.
 *   It never goes back while nodes remember: a node restarted empty
 *   votes only once admitted, that is, once its counters have been caught up from the other nodes after it
 *   (re)started (admission.ts for how and why: invariant J; node.ts for where it is checked: once per
 *   connection, off the acquire path). Delayed restart: a node votes only once its server has been up for
 *   restartDelay, unless a fresh set's bootstrap admitted it (node.ts).
 * - Waiting: in line (src/engines/quorum-line.ts): a node grants a free lock only to the first live waiter
 *   of its line, ordered by a ticket all nodes agree on; a release wakes that waiter alone, on its client's
 *   own channel `<prefix>!wake:<client id>`, on the n - q + 1 nodes it listens to (quorum-wait.ts).
 * - Limits: 1 to 256 nodes (use an odd number); the Redis backend's key and ttl limits; safety assumes the
 *   nodes' clocks advance at about our rate (the drift term), nodes that are independent masters, no
 *   FLUSHALL or eviction of the node's counter, and restartDelay at least the largest ttl any client uses.
 *
 * Files:
 * - driver.ts: the quorum engine's node over one master (each operation gated on the node's admission).
 * - line.ts: one node's lock in line mode (the Redis backend with the LINE_* scripts, wake-ups by client).
 * - node.ts: one master: restart checks once per connection, admission state, catch-up scheduling.
 * - admission.ts: the catch-up of a node's fence counter from the others, and why fences stay increasing.
 * - bootstrap.ts: the admission of a fresh set: the majority (or more) that answers, at once.
 * - admission-state.ts: admission's states, errors and shared helpers.
 * - fences.ts: a node's fence counters for a catch-up (its own, and names' from earlier versions).
 * - listing.ts: `list`, the locks a majority holds, from each node's SCAN.
 * - scripts.ts: the lock scripts with the waiting line (LINE_*), the node's counter (RAISE), and the STATE
 *   and ADMIT scripts.
 * - layout.ts: the node's counter and admission markers, the line's keys, the wake channels.
 * - connection.ts: waiting for a node's connection.
 * - doctor.ts: `fencelock doctor redlock://…`.
 * - url.ts: redlock:// parameters, node list, and each node's ioredis options.
 */
import { randomBytes } from 'node:crypto'
import type { Redis } from 'ioredis'
import type {
  AcquireRequest,
  AttemptResult,
  BreakOptions,
  BreakResult,
  DoctorFinding,
  ExtendResult,
  HeldLease,
  ListedLock,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { DEFAULT_TTL_MS } from '../../core/options.js'
import { loadDriver, readParams, redact } from '../../core/url.js'
import { MAX_NODES, Quorum } from '../../engines/quorum.js'
import { breakQuorumLock } from '../../engines/quorum-break.js'
import { ReleaseWaiting } from '../../engines/quorum-wait.js'
import { connect } from '../redis/connect.js'
import { DEFAULT_PREFIX } from '../redis/layout.js'
import { catchUp } from './admission.js'
import { doctor } from './doctor.js'
import { RedlockDriver } from './driver.js'
import { lineBackend } from './line.js'
import { listQuorum } from './listing.js'
import { RedlockNode } from './node.js'
import { nodeHosts, PARAMS } from './url.js'

export { PARAMS }

/** What `redlockBackend` is told. */
export interface RedlockBackendOptions {
  /**
   * One ioredis client per independent Redis master (use an odd number: 3, 5, 7). Create them with
   * `autoResendUnfulfilledCommands: false` (a command resent after a reconnect could run on a restarted
   * server before fencelock has checked it) and preferably `enableOfflineQueue: false` (a down node fails at
   * once instead of queueing).
   */
  readonly clients: readonly Redis[]
  /**
   * Prefix of every key fencelock writes on the nodes, including each node's admission marker
   * `<prefix>!admitted` (see admission.ts). @default 'fencelock:'
   */
  readonly prefix?: string | undefined
  /**
   * How long one node may take to answer before it counts as failed in that round.
   * @default ttl / 100, between 20 ms and 200 ms
   */
  readonly nodeTimeoutMs?: number | undefined
  /**
   * A node whose server has been up for less than this does not count toward a quorum (the Redlock
   * spec's delayed restart; set it to the largest ttl any client uses on these nodes). 0 turns it off,
   * which is safe only if every node persists each write (`appendonly yes`, `appendfsync always`).
   * @default the largest ttl this backend has been asked for
   */
  readonly restartDelayMs?: number | undefined
  /** Names the store in errors. */
  readonly id?: string | undefined
}

/**
 * Creates a Redlock backend over your ioredis clients (the backend never closes them).
 * @example
 * import { Redis } from 'ioredis'
 * const nodes = [6379, 6380, 6381].map((port) => new Redis({ port, autoResendUnfulfilledCommands: false }))
 * const locks = createLockClient(redlockBackend({ clients: nodes }), { ttl: '10s' })
 */
export function redlockBackend(options: RedlockBackendOptions): LockBackend {
  for (const c of options.clients ?? []) {
    if (c?.options?.autoResendUnfulfilledCommands !== false) {
      throw new TypeError(
        'Expected every Redlock client to be created with `autoResendUnfulfilledCommands: false`: ioredis would ' +
          'otherwise resend a lock command after a reconnect, possibly to a restarted server that must not ' +
          'count toward a quorum yet',
      )
    }
  }
  return new RedlockBackend(options, [])
}

/** `redlock://[user:password@]host1:port1,host2:port2,host3:port3[?prefix=app:&nodeTimeout=50ms&restartDelay=30s]` */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const ioredis = await loadDriver('ioredis', 'redlock', url, () => import('ioredis'))
  const params = readParams(url, PARAMS)
  // Each node's client as redis:// makes it (credentials, failure policy), plus what a vote needs.
  const clients = nodeHosts(url).map(
    (host) =>
      connect(ioredis, url, {
        node: host,
        extra: {
          // A down node fails at once instead of queueing commands that would run much later.
          enableOfflineQueue: false,
          // A command resent after a reconnect might reach a restarted server before it is checked.
          autoResendUnfulfilledCommands: false,
        },
      }).client as Redis,
  )
  try {
    return new RedlockBackend(
      {
        clients,
        prefix: params.prefix,
        nodeTimeoutMs: params.nodeTimeout,
        restartDelayMs: params.restartDelay,
        id: redact(url),
      },
      clients,
    )
  } catch (error) {
    for (const c of clients) c.disconnect()
    throw error
  }
}

/** The backend: the quorum engine and release waiting over one RedlockNode per client. */
/** Whether this process was told that a two-node set has no fault tolerance (once is enough). */
let warnedTwoNodes = false

/**
 * Two nodes are safe but worse than one: a majority of two is both, so either node down stops every lock.
 * Not refused (it is correct, and a set may be on its way to three); said once per process, as Node says
 * deprecations, where `fencelock doctor` would say it only to whoever runs it.
 */
function warnTwoNodes(): void {
  if (warnedTwoNodes) return
  warnedTwoNodes = true
  process.emitWarning(
    'A Redlock set of 2 nodes has no fault tolerance: a majority of 2 is both, so either node down stops ' +
      'every lock (one Redis alone fails less often). Use 3 or 5 nodes',
    { type: 'FencelockWarning', code: 'FENCELOCK_REDLOCK_TWO_NODES' },
  )
}

class RedlockBackend implements LockBackend {
  readonly id: string
  readonly capabilities = { expiry: 'server-ttl', notify: true, fifo: false } as const
  readonly #nodes: readonly RedlockNode[]
  readonly #quorum: Quorum
  readonly #waiting: ReleaseWaiting
  readonly #restartDelayMs: number | undefined
  /** The clients fromUrl made, closed with the backend (never the user's). */
  readonly #owned: readonly Redis[]
  readonly #prefix: string

  constructor(options: RedlockBackendOptions, owned: readonly Redis[]) {
    const clients = options.clients ?? []
    if (clients.length === 0 || clients.length > MAX_NODES) {
      throw new TypeError(`Expected 1 to ${MAX_NODES} Redis clients in \`clients\`, got ${clients.length}`)
    }
    this.#owned = owned
    this.#prefix = options.prefix ?? DEFAULT_PREFIX
    this.#restartDelayMs = options.restartDelayMs
    if (clients.length === 2) warnTwoNodes()
    const q = Math.floor(clients.length / 2) + 1
    // Names this client's waiters on the nodes (they are woken on its own channel: line.ts).
    const clientId = randomBytes(8).toString('hex')
    const nodes: RedlockNode[] = clients.map((client, i) => {
      const { backend, line } = lineBackend(client, clientId, options.prefix)
      return new RedlockNode(
        i,
        backend.id,
        client,
        backend,
        line,
        (node, delayMs, closed) => catchUp(node, nodes, q, delayMs, closed),
        // restartDelay; when it is not set and this client has used no ttl yet (an inspect or the doctor),
        // the default ttl: a catch-up must come after every grant a restarted node voted in has ended.
        () => options.restartDelayMs ?? (this.#quorum.largestTtlMs || DEFAULT_TTL_MS),
      )
    })
    this.#nodes = nodes
    this.id = options.id ?? `redlock://${nodes.map((node) => node.address).join(',')}`
    const drivers = nodes.map((node) => new RedlockDriver(node, () => this.#restartDelay()))
    this.#quorum = new Quorum(drivers, { id: this.id, nodeTimeoutMs: options.nodeTimeoutMs })
    this.#waiting = new ReleaseWaiting(drivers, q)
  }

  tryAcquire(request: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    return this.#quorum.tryAcquire(request, signal)
  }

  extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    return this.#quorum.extend(lease, ttlMs, signal)
  }

  release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    return this.#quorum.release(lease, signal)
  }

  abandon(request: AcquireRequest, signal: AbortSignal): Promise<void> {
    return this.#quorum.abandon(request, signal)
  }

  inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    return this.#quorum.inspect(key, signal)
  }

  list(prefix: string, signal: AbortSignal): AsyncIterable<ListedLock> {
    return listQuorum(this.#quorum, this.#nodes, this.#prefix, prefix, signal, this.id)
  }

  breakLock(key: string, options?: BreakOptions): Promise<BreakResult> {
    const signal = options?.signal ?? new AbortController().signal
    return breakQuorumLock(this.#quorum, key, options?.fence, signal)
  }

  waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<undefined> {
    return this.#waiting.waitForChange(req, signal)
  }

  doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    const ctx = {
      nodes: this.#nodes,
      q: this.#quorum.q,
      restartDelayMs: this.#restartDelayMs,
      largestTtlMs: () => this.#quorum.largestTtlMs,
    }
    return doctor(ctx, signal)
  }

  async close(): Promise<void> {
    for (const node of this.#nodes) node.dispose()
    await Promise.allSettled(this.#nodes.map((node) => node.backend.close()))
    for (const c of this.#owned) c.disconnect()
  }

  /** A node votes once its server has been up this long (the spec's delayed restart; see node.ts). */
  #restartDelay(): number {
    return this.#restartDelayMs ?? this.#quorum.largestTtlMs
  }
}
