/**
 * What operators do with ZooKeeper's locks: `inspect` one, `list` the held ones under a prefix, `break`
 * one. The holder of a lock is the first child of its node in Curator's order (layout.ts `inLine`) that is
 * an ephemeral node (a persistent child is another lock's node, from a Curator user's nested lock path);
 * Curator's nodes count as ours do (diagnose.ts `describeHolder` says whose they are).
 *
 * Each starts with a write the leader orders (`touchLeader`): the member our connection reads from may lag
 * behind the leader (a follower applies commits in its own time), and it answers our write only once it
 * has applied every commit before it, so the reads after it see every grant and release made before the
 * call (ZooKeeper's `sync`, which this client lacks). Without it, `inspect` right after an acquire on
 * another member's session could find the lock free.
 *
 * - list: one `getChildren` of the prefix (ZooKeeper cannot page a listing, so every lock name comes in
 *   that reply and is filtered here, after decoding), then per lock name a listing of its node and a read
 *   of its first child, LIST_BATCH names at a time (pipelined on the connection). Names kept after use
 *   not yet retired (retire.ts) cost their listing too.
 * - break: reads the holder's child, then deletes it at the data version read (our children's data never
 *   changes; the name is unique to one acquire, by its protected id and sequence number): exactly the grant
 *   read. The holder's `exists` watch and its next extend's `exists` find it gone; the next in line is
 *   woken by its data watch on that child; its czxid (the next fence) is above every earlier zxid.
 */
import type { Stat } from 'node-zookeeper-client'
import { raceSignal } from '../../core/abort.js'
import type { BreakOptions, BreakResult, ListedLock, LockInfo } from '../../core/backend.js'
import { retryRounds } from '../../core/retry.js'
import { children, read, removeAt, stat, touchLeader, type ZkClient, zxidOf } from './client.js'
import { describeHolder } from './diagnose.js'
import { inLine, lockPath, unsegment } from './layout.js'

/** Waits until the member our connection reads from has applied every commit made before now (see above). */
async function caughtUp(client: ZkClient, signal: AbortSignal): Promise<void> {
  await raceSignal(touchLeader(client), signal)
}

/** Lock names whose holders one listing reads at once (their requests are pipelined on one connection). */
export const LIST_BATCH = 64

/** Rounds of a break whose holder changed between its read and its delete (released, expired). */
const BREAK_ROUNDS = 10

const never = new AbortController().signal

/** The holder's child of the lock node `path`: its path, Stat and `inspect`'s view; undefined when free. */
async function holderOf(
  client: ZkClient,
  path: string,
  signal: AbortSignal,
): Promise<{ readonly path: string; readonly stat: Stat; readonly info: LockInfo } | undefined> {
  // The holder may go between the listing and the read: the next in line is read then.
  for (const child of inLine((await raceSignal(children(client, path), signal)) ?? [])) {
    const found = await raceSignal(read(client, `${path}/${child}`), signal)
    if (!found || found.stat.ephemeralOwner.every((byte) => byte === 0)) continue
    const info = describeHolder(child, found.data, zxidOf(found.stat.czxid))
    return { path: `${path}/${child}`, stat: found.stat, info }
  }
  return undefined
}

/**
 * Who holds `key`. Free: the lock node's pzxid (the zxid of the latest change of its children, the last
 * release's included), above every fence granted on it and below the next.
 */
export async function inspectLock(
  client: ZkClient,
  prefix: string,
  key: string,
  signal: AbortSignal,
): Promise<LockInfo | null> {
  const path = lockPath(key, prefix)
  await caughtUp(client, signal)
  const holder = await holderOf(client, path, signal)
  if (holder) return holder.info
  const node = await raceSignal(stat(client, path), signal)
  return node ? { held: false, fence: zxidOf(node.pzxid) } : null
}

/** The held locks whose names start with `userPrefix` (see the header). */
export async function* listLocks(
  client: ZkClient,
  prefix: string,
  userPrefix: string,
  signal: AbortSignal,
  batch = LIST_BATCH,
): AsyncGenerator<ListedLock> {
  const parent = prefix === '/' ? '' : prefix
  await caughtUp(client, signal)
  const names = (await raceSignal(children(client, prefix), signal)) ?? []
  const locks: Array<{ readonly key: string; readonly path: string }> = []
  for (const name of names) {
    const key = unsegment(name)
    // A name our escaping does not make is no lock that inspect or break can name.
    if (key?.startsWith(userPrefix)) locks.push({ key, path: `${parent}/${name}` })
  }
  for (let at = 0; at < locks.length; at += batch) {
    const found = await Promise.all(
      locks.slice(at, at + batch).map(async ({ key, path }) => {
        const holder = await holderOf(client, path, signal)
        return holder && { key, ...holder.info }
      }),
    )
    for (const lock of found) if (lock) yield lock
  }
}

/** Deletes the holder's child of `key` at the version read (see the header). */
export function breakLock(
  client: ZkClient,
  prefix: string,
  key: string,
  options: BreakOptions = {},
): Promise<BreakResult> {
  const signal = options.signal ?? never
  const path = lockPath(key, prefix)
  let synced = false
  // The grant the first round found: a later round ends only it, never a waiter's grant that followed it.
  let aimed = options.fence
  return retryRounds(
    BREAK_ROUNDS,
    async (): Promise<BreakResult | undefined> => {
      // Later rounds follow a delete the leader answered: caught up already.
      if (!synced) await caughtUp(client, signal)
      synced = true
      const holder = await holderOf(client, path, signal)
      if (!holder) return { broken: false }
      const { owner = '', fence = 0n, holder: description } = holder.info
      const lease = { owner, fence, ...(description === undefined ? {} : { holder: description }) }
      if (aimed !== undefined && aimed !== fence) return { broken: false, lease }
      aimed = fence
      // Not deleted: that child went meanwhile (released, its session ended); read who holds it now.
      const deleted = await raceSignal(removeAt(client, holder.path, holder.stat.version), signal)
      return deleted ? { broken: true, lease } : undefined
    },
    () => new Error(`the lock's holder kept changing under ${BREAK_ROUNDS} attempts to break it`),
  )
}
