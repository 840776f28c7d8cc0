/**
 * `list` over a Redlock set: the held locks are those an attempt holds on a majority of the nodes. Each
 * node is scanned in turn (the Redis backend's SCAN of lock keys, a page at a time); each lock key found is
 * read on every node (one inspect round per key, the keys of a page together), and listed if a majority
 * holds it. Any n - q + 1 nodes include a node of every majority, so the scan stops once that many nodes
 * were scanned to the end: a node that fails is skipped, and the scan fails only when too few are left.
 * A lock is listed from the first scanned node that holds it (a later node holding it too skips it), so
 * it is listed once without remembering what was listed.
 */
import type { ListedLock } from '../../core/backend.js'
import { BackendUnavailableError, QuorumError } from '../../core/errors.js'
import { within } from '../../core/within.js'
import type { Quorum } from '../../engines/quorum.js'
import { majorityHold } from '../../engines/quorum-inspect.js'
import { keysOf, lockKeyMatch, scanPages } from '../redis/listing.js'
import { STEP_MS } from './admission-state.js'
import type { RedlockNode } from './node.js'

/** The held locks whose keys start with `prefix`, on the `nodes` of `quorum` (same order). */
export async function* listQuorum(
  quorum: Quorum,
  nodes: readonly RedlockNode[],
  storePrefix: string,
  prefix: string,
  signal: AbortSignal,
  id: string,
): AsyncGenerator<ListedLock> {
  const match = lockKeyMatch(storePrefix)
  const scanned = new Set<number>()
  const failures: string[] = []
  const enough = quorum.n - quorum.q + 1
  for (const [i, node] of nodes.entries()) {
    if (scanned.size >= enough) return
    try {
      // A node's client does not queue commands while it connects: wait for it, or for its error.
      await within(STEP_MS, signal, (s) => node.reachable(s))
      for await (const names of scanPages(node.client, match.pattern, signal, STEP_MS)) {
        const found = await within(STEP_MS, signal, (s) =>
          keysOf(node.client, match, storePrefix, names, prefix, s),
        )
        const holds = await Promise.all(found.map(({ key }) => quorum.holds(key, signal)))
        for (const [k, infos] of holds.entries()) {
          const hold = majorityHold(infos, quorum.q)
          // Listed from the first node scanned to the end that holds it.
          if (!hold || hold.nodes.some((j) => j < i && scanned.has(j))) continue
          const view = quorum.viewOf(infos)
          if (view?.held) yield { ...found[k]!, ...view }
        }
      }
      scanned.add(i)
    } catch (error) {
      // A key that a majority could not be read for: the listing cannot go on without it.
      if (signal.aborted || error instanceof QuorumError) throw error
      failures.push(`node ${i}: ${(error as Error)?.message ?? error}`)
    }
  }
  if (scanned.size < enough) {
    throw new BackendUnavailableError(
      `Could not list the locks of ${id}: only ${scanned.size} of the ${quorum.n} Redlock nodes could be ` +
        `scanned and ${enough} are needed (${failures.join('; ')}). Check that these Redis servers are up`,
      { backend: id },
    )
  }
}
