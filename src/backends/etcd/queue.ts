/**
 * etcd as the queue-lock engine's adapter (src/engines/queue/adapter.ts): a lock's queue is the keys under
 * its prefix, ordered by create revision; each step is one transaction, range or watch.
 *
 * Every watcher it makes is kept until cancelled, and `close` cancels those left, in place or still being
 * set up: etcd3 re-opens its watch stream for as long as one watcher remains, every second at most, on a
 * timer that keeps the process alive, also once the client is closed. A watcher still being set up when
 * its client closes never settles etcd3's `create()`: whoever waited for it to cancel it never would.
 */
import type { Etcd3, IKeyValue, IRequestOp, IResponseOp, WatchBuilder, Watcher } from 'etcd3'
import type { RwLockMode } from '../../core/backend.js'
import type {
  Cancel,
  HeldEvents,
  OwnEntry,
  QueueAdapter,
  QueueState,
  SetEnqueued,
  SetEntry,
  Watch,
} from '../../engines/queue/adapter.js'
import { lockPrefix, prefixEnd } from './layout.js'
import { type LeaseId, leaseIdOf } from './leases.js'
import { QueueWatches } from './queue-watch.js'

/** etcd's range limit for "at most `n` keys": 0 is no limit (a grant rule that reads the whole line). */
const rangeLimit = (n: number): number => (Number.isFinite(n) ? n : 0)

/** The `limit` first keys under the prefix by create revision (one: the key holding the lock). */
export const firstOf = (p: string, limit = 1) => ({
  request_range: {
    key: Buffer.from(p),
    range_end: prefixEnd(p),
    sort_target: 'Create' as const,
    sort_order: 'Ascend' as const,
    limit: rangeLimit(limit),
  },
})

/** The `limit` newest keys under the prefix by create revision, newest first. */
const newestOf = (p: string, limit: number) => ({
  request_range: {
    key: Buffer.from(p),
    range_end: prefixEnd(p),
    sort_target: 'Create' as const,
    sort_order: 'Descend' as const,
    limit: rangeLimit(limit),
  },
})

/** What a watch asked of a closed adapter gets: a wait still under way then ends (the engine re-attempts). */
const closedError = () => new Error('the etcd backend is closed: no new watch is set up')

export class EtcdQueue implements QueueAdapter<LeaseId, IKeyValue> {
  readonly #client: Etcd3
  readonly #prefix: string
  /**
   * A watcher on a key nobody writes (the prefix itself), kept while the backend is open: etcd3 closes its
   * watch stream with the last watcher and opens a new one for the next, and a waiter's check right after
   * its wake-up ran 1.5-3 ms slower while the stream was being torn down (measured). One idle stream per
   * client is cheap.
   */
  #streamKeeper: Watcher | undefined
  /** Every watcher made and not cancelled yet (the stream keeper's included): `close` cancels them. */
  readonly #watchers = new Set<Watcher>()
  /** The waits' watches: one watcher per lock queue, shared by this client's waits in that line. */
  readonly #waits: QueueWatches
  #closed = false

  constructor(client: Etcd3, prefix: string) {
    this.#client = client
    this.#prefix = prefix
    this.#waits = new QueueWatches(
      client,
      (builder) => this.#track(builder),
      (watcher) => this.#cancel(watcher),
    )
  }

  queueOf(key: string): string {
    return lockPrefix(key, this.#prefix)
  }

  /** Go's Mutex names its key `<prefix><lease hex>`; ours adds the owner, unique to the acquire. */
  nameOf(queue: string, lease: LeaseId, owner: string): string {
    return `${queue}${lease.hex}-${owner}`
  }

  /**
   * If our key does not exist, put it and read the `looksBack` + 1 newest keys of the prefix by create
   * revision: ours (the txn's own put, newer than any other) and those just before it (a mutex: two keys).
   * Else read our key and the first `looksBack` keys of the prefix: our key exists already when an earlier
   * attempt of this acquire put it (we are in line), and its create revision is not known before the read,
   * so the keys just before it are not either (ours not among those first: the wait reads them).
   */
  async enqueue(queue: string, name: string, value: string, lease: LeaseId, looksBack: number) {
    const reply = await this.#client.kv.txn({
      compare: [{ target: 'Create', result: 'Equal', key: Buffer.from(name), create_revision: 0 }],
      success: [
        { request_put: { key: Buffer.from(name), value: Buffer.from(value), lease: lease.decimal } },
        newestOf(queue, looksBack + 1),
        ...this.lineReads(queue),
        ...this.entryPuts(name, lease),
      ],
      failure: [
        { request_range: { key: Buffer.from(name) } },
        firstOf(queue, looksBack),
        ...this.lineReads(queue),
      ],
    })
    const reads = reply.responses.slice(2)
    if (reply.succeeded) {
      const revision = reply.header.revision
      const [mine, ...before] = reply.responses[1]?.response_range.kvs ?? []
      // Ours is the newest, created by this txn: anything else (no key) is no answer to act on.
      if (mine?.create_revision !== revision) return { position: undefined }
      return { position: BigInt(revision), ...this.ruled(queue, name, before.reverse(), reads) }
    }
    const revision = reply.responses[0]?.response_range.kvs[0]?.create_revision
    if (revision === undefined) return { position: undefined }
    const first = reply.responses[1]?.response_range.kvs ?? []
    const at = first.findIndex((kv) => kv.create_revision === revision)
    if (at < 0) return { position: BigInt(revision) }
    return { position: BigInt(revision), ...this.ruled(queue, name, first.slice(0, at), reads) }
  }

  /**
   * An atomic set's step, ONE transaction: if every line is empty, put every entry as `enqueue` puts it
   * (same value, same lease), all at the transaction's revision; else read each line's first key. A line
   * is empty iff version = 0 holds over its whole prefix: etcd compares an empty range as a zero key-value,
   * and every existing key has version >= 1 (server's applyCompare). Our keys first in every line are an
   * earlier attempt's put whose reply was lost; ours in only some lines cannot be (one transaction put
   * them all), but if they were, they are deleted: a set never waits in a line.
   */
  async enqueueAll(entries: readonly SetEntry[], lease: LeaseId): Promise<SetEnqueued<IKeyValue>> {
    const reply = await this.#client.kv.txn({
      compare: entries.map(({ queue }) => ({
        target: 'Version' as const,
        result: 'Equal' as const,
        key: Buffer.from(queue),
        range_end: prefixEnd(queue),
        version: 0,
      })),
      success: entries.map(({ name, value }) => ({
        request_put: { key: Buffer.from(name), value: Buffer.from(value), lease: lease.decimal },
      })),
      failure: entries.map(({ queue }) => firstOf(queue)),
    })
    if (reply.succeeded) return { positions: entries.map(() => BigInt(reply.header.revision)) }
    const heads = reply.responses.map((op) => op.response_range?.kvs[0])
    const ours = entries.map(({ name }, i) => heads[i]?.key.toString() === name)
    if (ours.every(Boolean)) return { positions: heads.map((head) => BigInt(head!.create_revision)) }
    const left = entries.filter((_, i) => ours[i]).map(({ name }) => name)
    if (left.length > 0) await this.removeNames(left)
    return { heads: heads.map((head, i) => (ours[i] ? undefined : head)) }
  }

  /** Puts made with our entry, in its enqueue transaction (none; a read-write lock's writer: its gate). */
  protected entryPuts(_name: string, _lease: LeaseId): IRequestOp[] {
    return []
  }

  /** Reads made with every read of the line `queue` (none; a read-write lock's: its gates). */
  protected lineReads(_queue: string): IRequestOp[] {
    return []
  }

  /**
   * The entries ahead of our entry `name` as the grant rule takes them, from the line read and the replies
   * to `lineReads` (`reads`): as read, for a mutex; with each one's mode, for a read-write lock's reader.
   */
  protected ruled(
    _queue: string,
    _name: string,
    ahead: IKeyValue[],
    _reads: readonly IResponseOp[],
  ): { readonly ahead: readonly IKeyValue[]; readonly modes?: readonly RwLockMode[] } {
    return { ahead }
  }

  /**
   * The `looksBack` newest keys created before ours and our key, in one read-only transaction (no raft write). With
   * `after`, the read is serializable: served by the member from what it has applied, without a quorum
   * round; it counts only if that member has applied `after` at least.
   */
  async check(entry: OwnEntry, looksBack: number, after?: bigint): Promise<QueueState<IKeyValue> | 'behind'> {
    const serializable = after !== undefined
    const p = entry.queue
    const reply = await this.#client.kv.txn({
      compare: [],
      success: [
        {
          request_range: {
            key: Buffer.from(p),
            range_end: prefixEnd(p),
            max_create_revision: (entry.position - 1n).toString(),
            sort_target: 'Create',
            sort_order: 'Descend',
            limit: rangeLimit(looksBack),
            serializable,
          },
        },
        { request_range: { key: Buffer.from(entry.name), serializable } },
        ...this.lineReads(p).map((op) => ({ request_range: { ...op.request_range!, serializable } })),
      ],
      failure: [],
    })
    if (serializable && BigInt(reply.header.revision) < after) return 'behind'
    const mine = reply.responses[1]?.response_range.kvs[0]
    const ahead = (reply.responses[0]?.response_range.kvs ?? []).reverse()
    return {
      ...this.ruled(p, entry.name, ahead, reply.responses.slice(2)),
      mine: mine !== undefined && BigInt(mine.create_revision) === entry.position,
    }
  }

  /**
   * A watch on the key just before ours, on the watcher this client keeps on the lock's queue
   * (queue-watch.ts), from etcd's current revision: a watch from an earlier revision (the one read before)
   * is "unsynced" whenever anything was written meanwhile, and etcd then delivers its events from a
   * background loop that runs every 100 ms (contended handoffs took ~100 ms that way).
   */
  async watch(before: IKeyValue): Promise<Watch> {
    if (this.#closed) throw closedError()
    this.#keepWatchStream()
    return await this.#waits.watch(before.key)
  }

  async exists(before: IKeyValue): Promise<boolean> {
    const still = await this.#client.kv.range({ key: before.key })
    return still.kvs[0]?.create_revision === before.create_revision
  }

  async read(entry: OwnEntry) {
    const reply = await this.#client.kv.range({ key: Buffer.from(entry.name) })
    const mine = reply.kvs[0]
    return {
      mine: mine !== undefined && BigInt(mine.create_revision) === entry.position,
      at: BigInt(reply.header.revision),
    }
  }

  /**
   * Watches our own key from just after `from`: no delete after that is missed, also across a
   * reconnection (etcd3 resumes from the last revision it saw). Our own put moving the key to another
   * lease is a put, not a delete. Measured, an uncontended acquire and release costs the same with it as
   * without (p50 within ±5 % in interleaved runs): the create and cancel ride on the open stream.
   */
  watchHeld(entry: OwnEntry, from: bigint, events: HeldEvents): Cancel {
    // Closed meanwhile (the grant's watch is set after it reached its caller): every lock has ended.
    if (this.#closed) return { cancel: () => {} }
    this.#keepWatchStream()
    const watcher = this.#track(
      this.#client
        .watch()
        .key(entry.name)
        .startRevision((from + 1n).toString()),
    )
    watcher.on('delete', (kv) => {
      events.deleted(
        `its key was deleted from etcd at revision ${kv.mod_revision} (deleted directly, or its lease was ` +
          'revoked or expired)',
      )
    })
    // etcd cancelled the watch (its start revision was compacted away, say).
    watcher.on('error', () => events.failed())
    return { cancel: () => this.#cancel(watcher) }
  }

  /** Our key named in a token: the lease it is on now, if it is still the key we created (same create revision). */
  async adopt(entry: OwnEntry) {
    const reply = await this.#client.kv.range({ key: Buffer.from(entry.name) })
    const kv = reply.kvs[0]
    if (kv === undefined || BigInt(kv.create_revision) !== entry.position || kv.lease === '0') return null
    return { lease: leaseIdOf(kv.lease), at: BigInt(reply.header.revision) }
  }

  /** Only the key we created (same create revision) goes. */
  remove(entry: OwnEntry): Promise<boolean> {
    return this.ifOurs(entry, { request_delete_range: { key: Buffer.from(entry.name) } })
  }

  async removeNames(names: readonly string[]): Promise<void> {
    await this.#client.kv.txn({
      compare: [],
      success: names.map((name) => ({ request_delete_range: { key: Buffer.from(name) } })),
      failure: [],
    })
  }

  /** A put on an existing key keeps its create revision, so only its lease (and value) changes. */
  move(entry: OwnEntry, value: string, lease: LeaseId): Promise<boolean> {
    return this.ifOurs(entry, {
      request_put: { key: Buffer.from(entry.name), value: Buffer.from(value), lease: lease.decimal },
    })
  }

  goneReason(at?: bigint): string {
    return at === undefined
      ? 'its key is gone from etcd'
      : `its key is gone from etcd (found missing at revision ${at})`
  }

  /**
   * Cancels every watcher left (the stream keeper, waits' watches still being set up, holders'), without
   * waiting: etcd3's cancel waits for the server's word, and a server that does not answer (paused,
   * partitioned) would hold up close() for as long. A watcher still being set up is dropped by etcd3 once
   * its stream ends (the client's close ends it), instead of being set up again for ever.
   */
  async close(): Promise<void> {
    this.#closed = true
    this.#streamKeeper = undefined
    for (const watcher of [...this.#watchers]) this.#cancel(watcher)
  }

  /** One transaction applying `ops` only if our key is still the one we created (same create revision). */
  protected async ifOurs(entry: OwnEntry, ...ops: IRequestOp[]): Promise<boolean> {
    const key = Buffer.from(entry.name)
    const reply = await this.#client.kv.txn({
      compare: [{ target: 'Create', result: 'Equal', key, create_revision: entry.position.toString() }],
      success: ops,
      failure: [],
    })
    return reply.succeeded
  }

  #keepWatchStream() {
    if (this.#streamKeeper) return
    const keeper = this.#track(this.#client.watch().key(this.#prefix))
    this.#streamKeeper = keeper
    // Refused by etcd: the next watch makes another.
    keeper.once('error', () => {
      if (this.#streamKeeper === keeper) this.#streamKeeper = undefined
    })
  }

  /** The watcher `builder` makes, attached at once and kept until cancelled or refused by etcd. */
  #track(builder: WatchBuilder): Watcher {
    const watcher = builder.watcher()
    this.#watchers.add(watcher)
    // Refused or cancelled by etcd: etcd3 has dropped it already.
    watcher.once('error', () => this.#watchers.delete(watcher))
    return watcher
  }

  /** Cancels `watcher` without waiting for etcd's word (once; later calls do nothing). */
  #cancel(watcher: Watcher) {
    if (!this.#watchers.delete(watcher)) return
    watcher.cancel().catch(() => {})
  }
}
