/**
 * Leader election on the quorum engine: the engine (engine.ts) instantiated a second time, over each
 * node's election (an adapter whose lock in line stores the leader's value beside the hold), so that a
 * campaign is a quorum acquire with everything of the lock's: votes, validity, clean-up of lost attempts,
 * the waiting line, the term as the token M of the majority, written back. What an election adds, decided
 * here once for every quorum store:
 * - Proclaim: the new value on every node at once, each node writing it only while the leadership's own
 *   attempt holds it there; proclaimed once a majority took it, lost once so many refused that no majority
 *   can hold it, unknown otherwise (as an extend).
 * - Read (`inspect`): the majority's view (inspect.ts): a leader only where one attempt holds a majority,
 *   with the value most of its nodes show, and its term (the holder's own token in the leader's client; in
 *   another, the M most of its nodes show, with the first such node's index); a vacancy with no term. Approximate for observers: the nodes are read one by one, not at
 *   one instant, so a change under way (a new leader still being granted, a proclaim reaching the nodes)
 *   may show as a vacancy or the older value for a moment; a campaign or a proclaim that resolved is shown
 *   once it has reached the nodes that answer.
 * - Watch: every node announces each change of who leads or of the value; an observer wakes at the first
 *   announcement from any node that is up, and reads the majority again.
 * Waiting candidates are woken as lock waiters are (wait.ts).
 */
import { linkedAbort } from '../../core/abort.js'
import type {
  BackendCapabilities,
  BackendLimits,
  ElectionFacet,
  HeldLease,
  ProclaimResult,
} from '../../core/backend.js'
import type { QuorumAdapter } from './adapter.js'
import { onNodes, type Quorum } from './engine.js'
import { majorityVerdict, round, tally } from './round.js'
import type { ReleaseListener, ReleaseWaiting } from './wait.js'

/** A node of a quorum election: the lock's node operations over the election, plus proclaim and watch. */
export interface QuorumElectionAdapter extends QuorumAdapter, ReleaseListener {
  /**
   * Replaces the value while attempt `lease.owner` (an owner id on the nodes) holds the election here: true,
   * false when it does not, a throw when unknown (or when the node may not vote yet).
   */
  proclaim(lease: HeldLease, value: string, signal: AbortSignal): Promise<boolean>
  /** Resolves when this node announces a change of `key`'s leader or value, or when `signal` aborts. */
  watch(key: string, signal: AbortSignal): Promise<void>
}

/** The reason given to the watches still going once one node has woken the observer. */
const WOKEN = Object.freeze({ name: 'Stopped', message: 'stopped by the quorum election' })

/** What the facet says of itself: the store's id, capabilities and limits (the backend's). */
export interface QuorumElectionInfo {
  readonly id: string
  readonly capabilities: BackendCapabilities
  readonly limits?: BackendLimits | undefined
}

/**
 * The election facet of `quorum`, a Quorum over `nodes` (the same adapters, typed with what an election
 * adds), with `waiting` over them for its candidates.
 */
export function quorumElection(
  quorum: Quorum,
  nodes: readonly QuorumElectionAdapter[],
  waiting: ReleaseWaiting,
  info: QuorumElectionInfo,
): ElectionFacet {
  return {
    ...info,
    tryAcquire: (req, signal) => quorum.tryAcquire(req, signal),
    extend: (lease, ttlMs, signal) => quorum.extend(lease, ttlMs, signal),
    release: (lease, signal) => quorum.release(lease, signal),
    abandon: (req, signal) => quorum.abandon(req, signal),
    inspect: async (key, signal) => {
      const info = await quorum.inspect(key, signal)
      if (info === null || info.held) return info
      // A vacancy shows no term: the nodes' counters serve every name, so theirs would change with any
      // lock's grant, and observers would report a new vacancy each time.
      const { fence: _counter, ...vacant } = info
      return vacant
    },
    waitForChange: (req, signal) => waiting.waitForChange(req, signal),
    proclaim: (lease, value, signal) => proclaim(quorum, nodes, lease, value, signal),
    watch: (key, signal) => watch(nodes, key, signal),
  }
}

async function proclaim(
  quorum: Quorum,
  nodes: readonly QuorumElectionAdapter[],
  handle: HeldLease,
  value: string,
  signal: AbortSignal,
): Promise<ProclaimResult> {
  const lease = onNodes(handle)
  const { n, q } = quorum
  const { verdict, votes } = await round(
    n,
    quorum.defaultTimeoutMs,
    signal,
    (i, s) => nodes[i]!.proclaim(lease, value, s),
    (v) =>
      majorityVerdict(
        tally(v, (done) => done),
        n,
        q,
      ),
  )
  if (verdict === 'yes') return { proclaimed: true }
  // Not the leader's on so many nodes that no majority can hold it: leadership was lost.
  if (tally(votes, (done) => done).no > n - q) return { proclaimed: false }
  throw quorum.unreachable(lease.key, 'proclaim a value for', votes)
}

/** Resolves at the first change any node that is up announces (a node that is down tells nothing). */
function watch(nodes: readonly QuorumElectionAdapter[], key: string, signal: AbortSignal): Promise<void> {
  const link = linkedAbort(signal)
  return new Promise<void>((resolve) => {
    link.signal.addEventListener('abort', () => resolve(), { once: true })
    for (const node of nodes) {
      node.watch(key, link.signal).then(
        () => {
          if (!link.signal.aborted && node.up) resolve()
        },
        () => {},
      )
    }
  }).finally(() => {
    link.abort(WOKEN)
    link.dispose()
  })
}
