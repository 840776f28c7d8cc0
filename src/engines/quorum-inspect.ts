/**
 * `inspect` of a quorum lock, reconstructed from what each node holds: held when one attempt's owner id
 * holds a majority of the nodes, valid until the q-th longest of those leases ends; the fence is the
 * holder's own token when this client is the holder, else the counter most of the holding nodes show
 * (`grantCounter`). Pure: the votes in, the answer out (quorum.ts runs the round).
 */
import type { LockInfo } from '../core/backend.js'

/** Bits of a quorum fence that hold the index of the node that minted it. */
export const NODE_BITS = 8n

/** The acquire's owner id of a node-side owner id `<owner>.<attempt>` (other writers' values unchanged). */
export const acquireOwner = (owner: string): string => owner.replace(/^([0-9a-f]{32})\.[0-9a-z]+$/, '$1')

/**
 * A hold on fewer than all nodes. On a bare majority an extend counts only if every holding node renews
 * it: one more node failing ends the lock at its validity, and the holder should know why.
 */
function partialNote(held: number, n: number, q: number): string {
  const note = `held on ${held} of ${n} nodes`
  return held > q ? note : `${note}: a bare majority, so each extend needs every one of them to renew`
}

/** The nodes holding each owner id on the nodes (one attempt's hold), by that owner id. */
function holdsByOwner(infos: ReadonlyArray<LockInfo | null | undefined>): Map<string, number[]> {
  const byOwner = new Map<string, number[]>()
  infos.forEach((info, i) => {
    if (info?.held && info.owner !== undefined)
      byOwner.set(info.owner, [...(byOwner.get(info.owner) ?? []), i])
  })
  return byOwner
}

/**
 * The hold that makes the lock held: the owner id on the nodes of the attempt that holds `q` of them (at
 * most one can), and which nodes those are; undefined when none does.
 */
export function majorityHold(
  infos: ReadonlyArray<LockInfo | null | undefined>,
  q: number,
): { readonly owner: string; readonly nodes: readonly number[] } | undefined {
  for (const [owner, nodes] of holdsByOwner(infos)) if (nodes.length >= q) return { owner, nodes }
  return undefined
}

/**
 * The token M of the grant held on nodes `held`, from their counters: the value most of them show (ties:
 * the larger), with the first such node's index. Not their largest: a node whose part of the grant landed
 * after the verdict (its answer came late) minted from its own counter, which may be ahead of M (a waiter's
 * attempt was granted there alone and taken back), while at least q holding nodes show M itself (those
 * that minted it and those it was written back to) and fewer than q anything else. So with every holding
 * node answering this is exactly M; with some silent, the best guess.
 */
function grantCounter(infos: ReadonlyArray<LockInfo | null | undefined>, held: readonly number[]) {
  const count = new Map<bigint, { nodes: number; first: number }>()
  for (const i of held) {
    const f = infos[i]?.fence
    if (f === undefined) continue
    const seen = count.get(f)
    if (seen) seen.nodes++
    else count.set(f, { nodes: 1, first: i })
  }
  let best: [bigint, { nodes: number; first: number }] | undefined
  for (const entry of count) {
    if (!best || entry[1].nodes > best[1].nodes || (entry[1].nodes === best[1].nodes && entry[0] > best[0]))
      best = entry
  }
  return best === undefined ? undefined : (best[0] << NODE_BITS) | BigInt(best[1].first)
}

/**
 * The lock as the nodes' answers show it. `infos[i]` is node i's answer (undefined: it had none);
 * `tokenOf` gives the token of a hold this client has, by the acquire's owner id.
 */
export function inspectVotes(
  infos: ReadonlyArray<LockInfo | null | undefined>,
  q: number,
  tokenOf: (owner: string) => bigint | undefined,
): LockInfo | null {
  const n = infos.length
  const byOwner = holdsByOwner(infos)
  const fenceOf = (among: number[]) => {
    let m = -1n
    let at = -1
    for (const i of among) {
      const f = infos[i]?.fence
      if (f !== undefined && f > m) {
        m = f
        at = i
      }
    }
    return at < 0 ? undefined : (m << NODE_BITS) | BigInt(at)
  }
  for (const [onNode, held] of byOwner) {
    if (held.length < q) continue
    const owner = acquireOwner(onNode)
    // Valid while a majority holds it: until the q-th longest remaining lease ends.
    const remaining = held.map((i) => infos[i]!.expiresInMs ?? 0).sort((a, b) => b - a)
    const fence = tokenOf(owner) ?? grantCounter(infos, held)
    const holder = held.map((i) => infos[i]!.holder).find((h) => h !== undefined)
    return {
      held: true,
      owner,
      ...(holder === undefined ? {} : { holder }),
      ...(fence === undefined ? {} : { fence }),
      expiresInMs: remaining[q - 1]!,
      ...(held.length < n ? { note: partialNote(held.length, n, q) } : {}),
    }
  }
  const fence = fenceOf(infos.flatMap((info, i) => (info ? [i] : [])))
  const partial = [...byOwner].map(([owner, held]) => `${acquireOwner(owner)} on ${held.length}`).join(', ')
  if (fence === undefined && !partial) return null
  return {
    held: false,
    ...(fence === undefined ? {} : { fence }),
    ...(partial ? { note: `held without a majority (${partial} of ${n} nodes)` } : {}),
  }
}
