/**
 * Leader election on ZooKeeper: Curator's `LeaderLatch` layout, so a Java service's latch and fencelock
 * candidates on the same path compete in one line and see each other's leader. The queue-lock engine runs
 * it (src/engines/queue/election.ts); this file gives the layout, the leader's read and the observers' watch.
 *
 * - Layout: the election named `e` is the node `<prefix>/%election/<e escaped>` (layout.ts,
 *   `electionPath`: apart from every lock); each candidate is a child created EPHEMERAL_SEQUENTIAL in
 *   Curator's protected mode, `_c_<owner id as a UUID>-latch-<10-digit sequence>`, its data the
 *   candidate's value (Curator's participant id). The child first by the sequence after `latch-` leads;
 *   its czxid is the term. A path holding `lock-` children is a lock (Curator's `InterProcessMutex`):
 *   campaigning or reading there is refused, as a mixed line has no defined leader.
 * - Proclaim: the election node's own data becomes the value tagged with our term (layout.ts,
 *   `proclaimedData`), in a multi that checks our child still exists, once a read found its czxid is the
 *   term. Never a write to our child: a `LeaderLatch` waiting behind it watches it for its deletion alone,
 *   and a data change would spend that one-shot watch without waking it, so it would never take over.
 *   Curator reads a leader's participant id from its child: to Curator, a fencelock leader's value is the
 *   one it campaigned with.
 * - Observers: `inspect` orders the children (after a write the leader orders, as the lock's inspect),
 *   reads the election node and the first child: the value is the proclaimed one when its tag is the first
 *   child's czxid, else the child's data. `watch` sets a children watch and a data watch on the election's
 *   node (an `exists` watch while it does not exist), one of each per path and connection until it fires,
 *   shared by this backend's observers.
 */
import { raceSignal } from '../../core/abort.js'
import type { AcquireRequest, LockInfo } from '../../core/backend.js'
import { BackendUnavailableError } from '../../core/errors.js'
import type { OwnEntry } from '../../engines/queue/adapter.js'
import type { QueueElectionParts } from '../../engines/queue/election.js'
import type { SessionAdapter } from '../../engines/session/adapter.js'
import { children, read, setDataWhile, stat, touchLeader, type ZkClient, zxidOf } from './client.js'
import {
  electionPath,
  inLine,
  LATCH_NAME,
  LOCK_NAME,
  ownerOfProtected,
  proclaimedData,
  proclaimedValue,
} from './layout.js'
import { type QueueKind, type ZkEntry, ZkQueue } from './queue.js'
import type { ZkSession } from './sessions.js'

/** Refuses an election on a path that holds a lock's children. @throws {BackendUnavailableError} not retryable */
function latchLine(names: readonly string[], path: string): string[] {
  const lock = names.find((child) => child.includes(LOCK_NAME) && !child.includes(LATCH_NAME))
  if (lock !== undefined) {
    throw new BackendUnavailableError(
      `The ZooKeeper node ${path} holds a lock's child (${lock}, Curator's InterProcessMutex layout), not an ` +
        "election's (latch-): a path is either a lock or an election. Use another election name, or point " +
        'the lock elsewhere',
      { retryable: false },
    )
  }
  return inLine(names, LATCH_NAME)
}

/** An election's queue: `latch-` children holding the candidate's value alone, as Curator's `LeaderLatch`. */
export const ELECTION_QUEUE: QueueKind = {
  queueOf: electionPath,
  childName: LATCH_NAME,
  data: (value) => Buffer.from(value, 'utf8'),
  line: latchLine,
}

/** A queue whose entries hold a candidate's value, and can be proclaimed. */
export class ZkElectionQueue extends ZkQueue {
  entryValue(req: AcquireRequest): string {
    return req.value ?? ''
  }

  /**
   * Writes the value, tagged with our term, to the election's node while our child exists, once a read
   * found its czxid is the term; false when it is gone. The child's name (our protected id and its
   * sequence) is this acquire's alone, so the child the multi checks is the one the read found.
   */
  async proclaim(entry: OwnEntry, value: string): Promise<boolean> {
    const node = this.nodeOf(entry)
    if (!node) return false
    const s = await stat(node.client, node.path)
    if (!s || zxidOf(s.czxid) !== entry.position) return false
    return await setDataWhile(node.client, node.path, entry.queue, proclaimedData(entry.position, value))
  }
}

/** Per connection: the next change of each election path a watch waits for, and its data watches in place. */
interface Watches {
  readonly next: Map<string, { readonly change: Promise<void>; readonly resolve: () => void }>
  /** Election nodes with a data watch in place (ZooKeeper keeps it until the node changes). */
  readonly data: Set<string>
}
const watches = new WeakMap<ZkClient, Watches>()

/**
 * Resolves at the next change of who leads `path` or of its proclaimed value: a children watch (sent at
 * once, so it is in place before any read sent after it on the connection), then a data watch on the
 * election's node (unless one is in place: this protocol cannot remove a watch, so none is set twice).
 * Either one's event wakes whoever waits on the path then.
 */
function nextChange(client: ZkClient, path: string): Promise<void> {
  let w = watches.get(client)
  if (!w) {
    w = { next: new Map(), data: new Set() }
    watches.set(client, w)
  }
  const { next, data } = w
  const existing = next.get(path)
  if (existing) return existing.change
  let resolve!: () => void
  const change = new Promise<void>((done) => {
    resolve = done
  })
  next.set(path, { change, resolve })
  const fire = () => {
    const waiting = next.get(path)
    next.delete(path)
    waiting?.resolve()
  }
  const watching = async () => {
    const names = await children(client, path, fire)
    if (names === undefined) {
      // No node, so no children watch: told of its creation instead (or at once if it exists by now).
      if (await stat(client, path, fire)) fire()
      return
    }
    if (data.has(path)) return
    data.add(path)
    const onData = () => {
      data.delete(path)
      fire()
    }
    // Gone between the two reads: a change already. Failed: no watch is known to be in place.
    const found = await read(client, path, onData).catch((error: unknown) => {
      data.delete(path)
      throw error
    })
    if (!found) onData()
  }
  // A watch that could not be set (connection lost): a hint all the same; the observer reads again.
  watching().catch(fire)
  return change
}

/**
 * What the queue engine's elections need of ZooKeeper (src/engines/queue/election.ts): the elections' queue
 * (on the lock's sessions), the leader's read and the observers' watch. Failures of the read are said by
 * `unavailable`.
 */
export function zookeeperElection(
  setup: {
    readonly prefix: string
    readonly retireAfterMs: number
    readonly leases: SessionAdapter<ZkSession>
    /** The connection for reads outside any lease (yours, or the backend's reader). */
    readonly reader: () => ZkClient
  },
  unavailable: (key: string, what: string, error: unknown) => Error,
): QueueElectionParts<ZkSession, ZkEntry> {
  const inspect = async (name: string, signal: AbortSignal): Promise<LockInfo | null> => {
    const client = setup.reader()
    const path = electionPath(name, setup.prefix)
    try {
      await raceSignal(touchLeader(client), signal)
      // Pipelined: the election node is read after the listing, so a value it holds is at least as new.
      const listed = children(client, path)
      const election = read(client, path)
      election.catch(() => {})
      const names = (await raceSignal(listed, signal)) ?? []
      const proclaimed = (await raceSignal(election, signal))?.data
      for (const child of latchLine(names, path)) {
        const found = await raceSignal(read(client, `${path}/${child}`), signal)
        if (!found || found.stat.ephemeralOwner.every((byte) => byte === 0)) continue
        const term = zxidOf(found.stat.czxid)
        return {
          held: true,
          owner: ownerOfProtected(child) ?? child,
          fence: term,
          value: (proclaimed && proclaimedValue(proclaimed, term)) ?? found.data.toString('utf8'),
        }
      }
      const node = await raceSignal(stat(client, path), signal)
      return node ? { held: false, fence: zxidOf(node.pzxid) } : null
    } catch (error) {
      throw unavailable(name, 'read', error)
    }
  }

  const watch = async (name: string, signal: AbortSignal): Promise<void> => {
    await raceSignal(nextChange(setup.reader(), electionPath(name, setup.prefix)), signal).catch(() => {})
  }

  return {
    queue: new ZkElectionQueue(setup.prefix, setup.retireAfterMs, ELECTION_QUEUE),
    leases: setup.leases,
    inspect,
    watch,
  }
}
