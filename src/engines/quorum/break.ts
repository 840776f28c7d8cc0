/**
 * An operator's break of a quorum lock (`breakLock`, engine.ts): read what every node holds, find the
 * attempt that holds a majority, then end that attempt's hold on every node that answers, each node
 * owner-conditioned (`QuorumAdapter.breakHold`): a hold granted since, to anyone, is never touched.
 *
 * - Broken when a majority ended it: no majority is left to renew it, so the holder's next extend finds
 *   it gone on more than n - q nodes and reports the lock lost. A node that did not answer keeps the hold
 *   until its ttl, which cannot make a majority on its own.
 * - The fence is kept: no counter is touched, and the broken grant's token M was written back to a
 *   majority, which every later majority shares a node with, so the next grant mints more than M (and a
 *   node restarted empty is caught up before it votes, admission as ever).
 * - `fence`: a grant is named by M, the token without its node index (grants never share an M: each
 *   later majority mints more). The nodes show M as the counter most holding nodes have (inspect's
 *   `grantCounter`); the index they show may differ from the holder's (a node written back to M that comes
 *   first), so only M is compared. The token reported is the nodes' view (inspect's), or `fence` itself when it matched.
 * - A round that finds the hold gone on some nodes (released or expired meanwhile) reads again, a bounded
 *   number of times (the core's `retryRounds`), and ends only the grant the first round found: a waiter's
 *   grant that followed it is never touched.
 */
import type { BreakResult } from '../../core/backend.js'
import { retryRounds } from '../../core/retry.js'
import { OPERATOR_NODE_TIMEOUT_MS, type Quorum } from './engine.js'
import { majorityHold, NODE_BITS } from './inspect.js'
import { round, tally } from './round.js'

/** How many times a break reads again after the lock changed under it. */
const BREAK_ROUNDS = 3

/** Breaks the lock `key` (only the grant of `fence`, when given) on `quorum`'s nodes. */
export function breakQuorumLock(
  quorum: Quorum,
  key: string,
  fence: bigint | undefined,
  signal: AbortSignal,
): Promise<BreakResult> {
  const aim = { fence }
  return retryRounds(
    BREAK_ROUNDS,
    () => breakOnce(quorum, key, aim, signal),
    () => new Error(`the lock kept changing under ${BREAK_ROUNDS} attempts to break it`),
  )
}

/**
 * One read and break: what it did, or undefined when the hold it read ended meanwhile on some nodes.
 * `aim.fence`: the grant to end (asked for, or found by the first round).
 */
async function breakOnce(
  quorum: Quorum,
  key: string,
  aim: { fence: bigint | undefined },
  signal: AbortSignal,
): Promise<BreakResult | undefined> {
  const { fence } = aim
  const infos = await quorum.holds(key, signal)
  const hold = majorityHold(infos, quorum.q)
  const view = quorum.viewOf(infos)
  if (!hold || !view?.held || view.owner === undefined) return { broken: false }
  const shown = view.fence ?? 0n
  const matches = fence === undefined || fence >> NODE_BITS === shown >> NODE_BITS
  const lease = {
    owner: view.owner,
    fence: fence !== undefined && matches ? fence : shown,
    ...(view.holder === undefined ? {} : { holder: view.holder }),
  }
  if (!matches) return { broken: false, lease }
  aim.fence = lease.fence
  const { votes } = await round(
    quorum.n,
    OPERATOR_NODE_TIMEOUT_MS,
    signal,
    (i, s) => breakOn(quorum, i, key, hold.owner, s),
    // Every node that answers gets it: a hold left on a node would block that node until its ttl.
    (v) => (v.includes(undefined) ? undefined : true),
  )
  const t = tally(votes, (ended) => ended)
  if (t.yes >= quorum.q) return { broken: true, lease }
  if (t.failed > quorum.n - quorum.q) throw quorum.unreachable(key, 'break', votes)
  return undefined
}

function breakOn(quorum: Quorum, i: number, key: string, owner: string, s: AbortSignal): Promise<boolean> {
  const node = quorum.nodes[i]!
  if (!node.breakHold) throw new TypeError(`${node.id} cannot break a hold`)
  return node.breakHold(key, owner, s)
}
