/**
 * One read of a line of children with their data, for the diagnostic reads of the lines that are not a
 * lock's (a semaphore's leases, a read-write lock's entries): who holds and who waits. A write the leader
 * orders goes first, so the reads after it on this connection see every earlier grant (a follower may be
 * behind otherwise). `holderOf` reads who a child's data names.
 */
import { raceSignal } from '../../core/abort.js'
import { children, read, touchLeader, type ZkClient, zxidOf } from './client.js'
import { ownerOfProtected } from './layout.js'

/** A child of the line, as the read found it. */
export interface LineChild {
  readonly child: string
  readonly data: Buffer
  /** Its czxid: the grant's fence or sequence. */
  readonly sequence: bigint
}

/**
 * The children of `node` in the order `order` gives (gone ones skipped), with `node`'s own data and its
 * pzxid (the zxid of its latest child change, at least every child's czxid); undefined when `node` is not there.
 */
export async function readLine(
  client: ZkClient,
  node: string,
  order: (names: readonly string[]) => string[],
  signal: AbortSignal,
): Promise<{ readonly data: Buffer; readonly entries: LineChild[]; readonly pzxid: bigint } | undefined> {
  await raceSignal(touchLeader(client), signal)
  const own = read(client, node)
  const listed = children(client, node)
  listed.catch(() => {})
  const found = await raceSignal(own, signal)
  if (!found) return undefined
  const names = order((await raceSignal(listed, signal)) ?? [])
  const got = await raceSignal(Promise.all(names.map((child) => read(client, `${node}/${child}`))), signal)
  const entries = names.flatMap((child, i) => {
    const one = got[i]
    return one ? [{ child, data: one.data, sequence: zxidOf(one.stat.czxid) }] : []
  })
  return { data: found.data, entries, pzxid: zxidOf(found.stat.pzxid) }
}

/**
 * Who a child's data names (a lease's, a read-write lock entry's): "<owner> <holder>", then "session
 * timeout <ms> ms" (layout.ts `entryData`).
 */
export function holderOf(
  child: string,
  data: Buffer,
): { owner: string; holder?: string; timeoutMs?: number } {
  const [value = '', timeout] = data.toString('utf8').split('\n')
  const ours = ownerOfProtected(child)
  const space = value.indexOf(' ')
  const owner = space < 0 ? value : value.slice(0, space)
  const ms = timeout && /^session timeout (\d+) ms$/.exec(timeout)
  // A Curator node's data is its host's address: named by its child's name.
  if (ours === undefined || !owner) return { owner: child }
  return {
    owner,
    ...(space < 0 ? {} : { holder: value.slice(space + 1) }),
    ...(ms ? { timeoutMs: Number(ms[1]) } : {}),
  }
}
