/**
 * The waits' watches of one etcd client: one watcher per lock queue (its key prefix, deletions only),
 * shared by every wait of this client in that line, each wait listening for the deletion of the one key
 * it waits for. A release then wakes one waiter (the next in line) and no other.
 *
 * Why not a watcher per wait: etcd3 sets its watchers up one at a time on a stream (it sends the next
 * create once etcd answered the last). With 125 waiters of one lock in a client, their creates queued
 * behind each other for seconds under load (5-40 ms each); the core's attempts meanwhile read the line
 * themselves, once a second per waiter, which slowed every create further: measured at 500 waiters across
 * 4 clients, a hand-over took up to a poll interval (about a second) and idle waiters cost 0.6-0.9
 * requests a second each. One watcher per line costs a client one create, whatever its number of waiters.
 *
 * A watcher in place hears every deletion after the revision it started from, also across reconnections
 * (etcd3 resumes it from the last revision it saw), so a wait on one that is in place is in place at once.
 */
import type { Etcd3, WatchBuilder, Watcher } from 'etcd3'
import type { Watch } from '../../engines/queue/adapter.js'

/** One lock queue's watcher and the waits on it, by the key each waits for (bytes as latin1). */
interface QueueWatcher {
  /** Its queue's prefix (bytes as latin1). */
  readonly id: string
  readonly watcher: Watcher
  /** Settles once etcd created the watcher; rejects if etcd refused it. */
  readonly inPlace: Promise<void>
  readonly waits: Map<string, Set<(at: bigint | undefined) => void>>
  /** The waits on it that have not been cancelled: the watcher is cancelled with the last. */
  users: number
}

/** The queue of `key`: lock, election and foreign (Go's, etcdctl's) keys are `<queue prefix>/<name without a slash>`. */
const queueOf = (key: Buffer): Buffer => key.subarray(0, key.lastIndexOf(0x2f) + 1)

/** Resolves once etcd created `watcher` (what etcd3's `create()` waits for), rejects if etcd refused it. */
function inPlace(watcher: Watcher): Promise<void> {
  return new Promise((resolve, reject) => {
    const connected = () => {
      watcher.off('error', refused)
      resolve()
    }
    const refused = (error: Error) => {
      watcher.off('connected', connected)
      reject(error)
    }
    watcher.once('connected', connected)
    watcher.once('error', refused)
  })
}

export class QueueWatches {
  readonly #client: Etcd3
  /** Makes a watcher tracked by the adapter (which cancels those left at close). */
  readonly #track: (builder: WatchBuilder) => Watcher
  readonly #cancel: (watcher: Watcher) => void
  readonly #byQueue = new Map<string, QueueWatcher>()

  constructor(client: Etcd3, track: (builder: WatchBuilder) => Watcher, cancel: (watcher: Watcher) => void) {
    this.#client = client
    this.#track = track
    this.#cancel = cancel
  }

  /**
   * A watch on `key`'s deletion, on its queue's shared watcher; resolves once that watcher is in place.
   * `gone` settles with the deletion's revision, or with undefined when etcd ended the watcher (its start
   * compacted away, say): a hint all the same, the engine re-checks.
   */
  async watch(key: Buffer): Promise<Watch> {
    const queue = this.#of(queueOf(key))
    const name = key.toString('latin1')
    let resolve!: (at: bigint | undefined) => void
    const gone = new Promise<bigint | undefined>((r) => {
      resolve = r
    })
    const listeners = queue.waits.get(name) ?? new Set()
    queue.waits.set(name, listeners)
    listeners.add(resolve)
    queue.users++
    let cancelled = false
    const cancel = () => {
      if (cancelled) return
      cancelled = true
      listeners.delete(resolve)
      if (listeners.size === 0 && queue.waits.get(name) === listeners) queue.waits.delete(name)
      if (--queue.users > 0) return
      if (this.#byQueue.get(queue.id) === queue) this.#byQueue.delete(queue.id)
      this.#cancel(queue.watcher)
    }
    try {
      await queue.inPlace
    } catch (error) {
      cancel()
      throw error
    }
    return { gone, cancel }
  }

  /** The shared watcher of `prefix`, made at the first wait on it. */
  #of(prefix: Buffer): QueueWatcher {
    const id = prefix.toString('latin1')
    const existing = this.#byQueue.get(id)
    if (existing) return existing
    const watcher = this.#track(this.#client.watch().prefix(prefix).only('delete'))
    const queue: QueueWatcher = { id, watcher, inPlace: inPlace(watcher), waits: new Map(), users: 0 }
    // Refused (the waits on it reject) or not: handled by each wait; this keeps it from being unhandled.
    queue.inPlace.catch(() => {})
    watcher.on('delete', (kv) => {
      const at = BigInt(kv.mod_revision)
      for (const resolve of queue.waits.get(kv.key.toString('latin1')) ?? []) resolve(at)
    })
    // Ended by etcd: every wait on it re-checks, and the next wait makes a new watcher.
    watcher.once('error', () => {
      if (this.#byQueue.get(id) === queue) this.#byQueue.delete(id)
      for (const listeners of queue.waits.values()) for (const resolve of listeners) resolve(undefined)
    })
    this.#byQueue.set(id, queue)
    return queue
  }
}
