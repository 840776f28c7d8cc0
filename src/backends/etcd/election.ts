/**
 * Leader election on etcd: Go's `concurrency.Election` layout, so `etcdctl elect` and Go services see
 * fencelock's leaders and fencelock sees theirs. The queue-lock engine runs it (src/engines/queue/election.ts); this
 * file gives the layout, the leader's read and the observers' watch.
 *
 * - Layout: the election named `e` is the set of keys under `<prefix>%election/<e escaped>/` (layout.ts,
 *   `electionPrefix`: apart from every lock), one per candidate: `<lease hex>-<owner>` on its session's
 *   lease (Go's `Campaign` writes `<lease hex>`; the ordering ignores the name), its value the candidate's
 *   value. The key with the lowest create revision leads; its create revision is the term.
 * - Proclaim: a put of our key's new value, in a transaction guarded on its create revision (as Go's
 *   `Proclaim`), keeping its lease (`ignore_lease`).
 * - Observers: `inspect` reads the first key by create revision (one range) and its lease's remaining
 *   time (one `leaseTimeToLive`); `watch` is a watch on the election's prefix from just after the latest
 *   read of that election by this backend, so that a change between that read and the watch wakes it at
 *   once; any put or delete under the prefix wakes it (a new candidate too: one spurious read).
 */
import type { Etcd3, IKeyValue, Watcher } from 'etcd3'
import { raceSignal } from '../../core/abort.js'
import type { AcquireRequest, LockInfo } from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import type { OwnEntry } from '../../engines/queue/adapter.js'
import type { QueueElectionParts } from '../../engines/queue/election.js'
import { electionPrefix, electionsPrefix } from './layout.js'
import { EtcdLeases, type LeaseId } from './leases.js'
import { leaseLeft } from './operations.js'
import { EtcdQueue, firstOf } from './queue.js'

/** How many elections' latest read revision one backend remembers for its observers' watches. */
const READS_KEPT = 1024

/** A queue whose entries hold a candidate's value, and can be proclaimed. */
export class EtcdElectionQueue extends EtcdQueue {
  readonly #client: Etcd3

  constructor(client: Etcd3, prefix: string) {
    super(client, electionsPrefix(prefix))
    this.#client = client
  }

  entryValue(req: AcquireRequest): string {
    return req.value ?? ''
  }

  /** Go's `Proclaim`: put the value if our key's create revision is still the term; the lease stays. */
  async proclaim(entry: OwnEntry, value: string): Promise<boolean> {
    const key = Buffer.from(entry.name)
    const reply = await this.#client.kv.txn({
      compare: [{ target: 'Create', result: 'Equal', key, create_revision: entry.position.toString() }],
      success: [{ request_put: { key, value: Buffer.from(value), ignore_lease: true } }],
      failure: [],
    })
    return reply.succeeded
  }
}

/** The owner id in a candidate's key `<queue><lease hex>-<owner>`; a foreign key (Go's) names itself. */
function ownerOf(kv: IKeyValue, queue: string): string {
  const key = kv.key.toString('utf8')
  const rest = key.slice(queue.length)
  const dash = rest.indexOf('-')
  return dash < 0 ? key : rest.slice(dash + 1)
}

/**
 * What the queue engine's elections need of etcd (src/engines/queue/election.ts): the elections' queue, the
 * leader's read and the observers' watch. Failures of the read are said by `unavailable`.
 */
export function etcdElection(
  client: Etcd3,
  prefix: string,
  unavailable: (key: string, what: string, error: unknown) => Error,
): QueueElectionParts<LeaseId, IKeyValue> {
  /** The revision of this backend's latest read of each election: an observer's next watch starts after it. */
  const reads = new BoundedMap<string, bigint>(READS_KEPT)
  const watchers = new Set<Watcher>()

  const inspect = async (name: string, signal: AbortSignal): Promise<LockInfo> => {
    const p = electionPrefix(name, prefix)
    let reply: Awaited<ReturnType<typeof client.kv.range>>
    try {
      reply = await raceSignal(client.kv.range(firstOf(p).request_range), signal)
    } catch (error) {
      throw unavailable(name, 'read', error)
    }
    const revision = BigInt(reply.header.revision)
    if ((reads.get(name) ?? -1n) < revision) reads.set(name, revision)
    const leader = reply.kvs[0]
    // Vacant: the store's revision, above every term so far and below the next.
    if (!leader) return { held: false, fence: revision }
    const left = await leaseLeft(client, leader.lease, signal).catch(() => undefined)
    return {
      held: true,
      owner: ownerOf(leader, p),
      fence: BigInt(leader.create_revision),
      value: leader.value.toString('utf8'),
      ...(left === undefined ? {} : { expiresInMs: left }),
    }
  }

  const watch = (name: string, signal: AbortSignal): Promise<void> =>
    new Promise<void>((resolve) => {
      if (signal.aborted) return resolve()
      const from = reads.get(name)
      const builder = client.watch().prefix(electionPrefix(name, prefix))
      const watcher = (from === undefined ? builder : builder.startRevision((from + 1n).toString())).watcher()
      watchers.add(watcher)
      const done = () => {
        signal.removeEventListener('abort', done)
        if (watchers.delete(watcher)) watcher.cancel().catch(() => {})
        resolve()
      }
      // Any change under the prefix (a candidate, a leader leaving, a proclaim), or the watch failing
      // (its start compacted away): the observer reads again.
      watcher.once('put', done)
      watcher.once('delete', done)
      watcher.once('error', done)
      signal.addEventListener('abort', done, { once: true })
    })

  return {
    queue: new EtcdElectionQueue(client, prefix),
    leases: new EtcdLeases(client),
    inspect,
    watch,
    close() {
      for (const watcher of [...watchers]) {
        watchers.delete(watcher)
        watcher.cancel().catch(() => {})
      }
    },
  }
}
