/**
 * Redlock: one lock over N independent Redis masters, as the Redlock specification describes it: the
 * quorum engine (src/engines/quorum/engine.ts, which holds the algorithm: rounds, verdicts, clean-up of failed
 * attempts, per-attempt owner ids, the fence write-back) over the single-node Redis backend, whose scripts
 * run unchanged on each node.
 *
 * - Layout: on each node, the Redis backend's keys (redis/mutex/layout.ts): `<prefix>{<key>}` = the owner
 *   id of one attempt, `<owner>.<attempt>`, with the lease as PX expiry; `<prefix>{<key>}:fence` = the hold's
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
 * - Waiting: in line (src/engines/quorum/line.ts): a node grants a free lock only to the first live waiter
 *   of its line, ordered by a ticket all nodes agree on; a release wakes that waiter alone, on its client's
 *   own channel `<prefix>!wake:<client id>`, on the n - q + 1 nodes it listens to (src/engines/quorum/wait.ts).
 * - Election: a second quorum over each node's election in line (election/, src/engines/quorum/election.ts):
 *   `<prefix>!election{<name>}` and its value beside it; terms minted from the same node counter.
 * - Limits: 1 to 256 nodes (use an odd number); the Redis backend's key and ttl limits; safety assumes the
 *   nodes' clocks advance at about our rate (the drift term), nodes that are independent masters, no
 *   FLUSHALL or eviction of the node's counter, and restartDelay at least the largest ttl any client uses.
 *
 * Files:
 * - adapter.ts: the quorum engine's node over one master (each operation gated on the node's admission).
 * - election/: one node's election in line (line.ts) and its scripts (scripts.ts).
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
import type { LockBackend } from '../../core/backend.js'
import { DEFAULT_TTL_MS } from '../../core/options.js'
import { loadDriver, readParams, redact } from '../../core/url.js'
import { QUORUM_CAPABILITIES, quorumBackend } from '../../engines/quorum/backend.js'
import { quorumElection } from '../../engines/quorum/election.js'
import { MAX_NODES, Quorum } from '../../engines/quorum/engine.js'
import { ReleaseWaiting } from '../../engines/quorum/wait.js'
import { connect } from '../redis/connect.js'
import { DEFAULT_PREFIX } from '../redis/keys.js'
import { mutexLock, RedlockAdapter, RedlockElectionAdapter } from './adapter.js'
import { catchUp } from './admission.js'
import { doctor } from './doctor.js'
import type { ElectionLine } from './election/line.js'
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
  return redlockBackendOf(options, [])
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
    return redlockBackendOf(
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

/**
 * The backend: the quorum engine and its release waiting (src/engines/quorum/backend.ts) over one
 * RedlockNode per client, and the election, a second quorum over each node's election in line.
 * `owned`: the clients fromUrl made, closed with the backend (never the user's).
 */
function redlockBackendOf(options: RedlockBackendOptions, owned: readonly Redis[]): LockBackend {
  const clients = options.clients ?? []
  if (clients.length === 0 || clients.length > MAX_NODES) {
    throw new TypeError(`Expected 1 to ${MAX_NODES} Redis clients in \`clients\`, got ${clients.length}`)
  }
  const prefix = options.prefix ?? DEFAULT_PREFIX
  const { restartDelayMs } = options
  if (clients.length === 2) warnTwoNodes()
  const q = Math.floor(clients.length / 2) + 1
  // Names this client's waiters on the nodes (they are woken on its own channel: line.ts).
  const clientId = randomBytes(8).toString('hex')
  const elections: ElectionLine[] = []
  // A node votes once its server has been up this long (the spec's delayed restart; see node.ts): the
  // largest ttl this client used, on locks or elections.
  const largestTtlMs = (): number => Math.max(quorum.largestTtlMs, electionQuorum.largestTtlMs)
  const restartDelay = (): number => restartDelayMs ?? largestTtlMs()
  const nodes: RedlockNode[] = clients.map((client, i) => {
    const { backend, line, election } = lineBackend(client, clientId, options.prefix)
    elections.push(election)
    return new RedlockNode(
      i,
      backend.id,
      client,
      backend,
      line,
      (node, delayMs, closed) => catchUp(node, nodes, q, delayMs, closed),
      // When this client has used no ttl yet (an inspect or the doctor), the default ttl: a catch-up must
      // come after every grant a restarted node voted in has ended.
      (): number => restartDelayMs ?? (largestTtlMs() || DEFAULT_TTL_MS),
    )
  })
  const id = options.id ?? `redlock://${nodes.map((node) => node.address).join(',')}`
  const adapters = nodes.map((node) => new RedlockAdapter(node, restartDelay, mutexLock(node)))
  const quorum: Quorum = new Quorum(adapters, { id, nodeTimeoutMs: options.nodeTimeoutMs })
  // The election mints from the same node counters, so a term never goes back on a node restarted empty
  // (admission catches them up).
  const candidates = nodes.map((node, i) => new RedlockElectionAdapter(node, restartDelay, elections[i]!))
  const electionQuorum: Quorum = new Quorum(candidates, {
    id,
    primitive: 'election',
    nodeTimeoutMs: options.nodeTimeoutMs,
  })
  return quorumBackend(quorum, new ReleaseWaiting(adapters, q), {
    id,
    election: quorumElection(electionQuorum, candidates, new ReleaseWaiting(candidates, q), {
      id,
      capabilities: QUORUM_CAPABILITIES,
    }),
    list: (under, signal) => listQuorum(quorum, nodes, prefix, under, signal, id),
    doctor: (signal) => doctor({ nodes, q: quorum.q, restartDelayMs, largestTtlMs }, signal),
    close: async () => {
      for (const node of nodes) node.dispose()
      await Promise.allSettled(nodes.map((node) => node.backend.close()))
      for (const c of owned) c.disconnect()
    },
  })
}
