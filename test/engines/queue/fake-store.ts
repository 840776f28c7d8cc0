/**
 * An in-memory store for the queue-lock and session engines' unit tests: a queue adapter and a lease adapter
 * over one map of entries, with etcd's semantics where the engines rely on them (one global position that
 * only grows; an entry's position kept when it moves to another lease; entries removed with their lease),
 * and knobs a test turns to make the faults the engines must survive: a write held in flight, a reply
 * lost after the write landed, an entry deleted behind its owner's back, a lease that expires, keep-alives
 * acknowledged only when the test says so.
 */
import type {
  Cancel,
  HeldEvents,
  OwnEntry,
  QueueAdapter,
  QueueState,
  Watch,
} from '../../../src/engines/queue/adapter.js'
import type { Lease, LeaseEvents, SessionAdapter } from '../../../src/engines/session/adapter.js'

export interface FakeEntry {
  readonly queue: string
  readonly name: string
  readonly value: string
  readonly lease: number
  readonly position: bigint
}

export interface FakeLease {
  readonly id: number
  readonly leaseMs: number
  readonly events: LeaseEvents
  /** Granted and neither revoked nor expired. */
  alive: boolean
  revoked: boolean
  /** What `keepAliveOnce` answers: the ttl in ms (<= 0: gone), or an error to throw. */
  answer: number | Error
}

/** A promise and the functions that settle it. */
export function deferred<T = void>() {
  let resolve!: (value: T) => void
  let reject!: (error: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/** Lets every pending promise callback run (the fake answers on later turns, like a store). */
export const settle = () => new Promise<void>((resolve) => setImmediate(resolve))

export class FakeQueueStore implements QueueAdapter<number, FakeEntry>, SessionAdapter<number> {
  position = 0n
  readonly entries = new Map<string, FakeEntry>()
  readonly leases = new Map<number, FakeLease>()
  /** Every call, by method name, with the entry name it concerned (for "who was woken" checks). */
  readonly calls: Array<{ readonly op: string; readonly name?: string | undefined }> = []
  /** Set by a test: the next enqueue waits for this before it applies its write. */
  holdNextWrite: Promise<void> | undefined
  /** Set by a test: a cheap read after a wake-up (`check` with `after`) is served by a replica behind it. */
  replicaBehind = false
  /** Set by a test: the next enqueue applies its write, then fails as if its reply were lost. */
  loseNextReply = false
  /**
   * Set by a test before a lease is granted: its leases say every answered request keeps them alive
   * (`Lease.requestsKeepAlive`, as ZooKeeper's sessions), proving `answer` ms from the request's send.
   */
  requestsKeepAlive = false
  /** Set by a test: this many deletes (`remove`, `removeNames`) fail next, deleting nothing (a leader crash). */
  failDeletes = 0
  /** How many keep-alives (`keepAliveOnce`) were sent, on any lease. */
  keepAlives = 0
  readonly #deletions = new Map<string, Array<(position: bigint) => void>>()
  #leaseIds = 0

  // --- SessionAdapter ---------------------------------------------------------------------------------------

  leaseMs(ttlMs: number): number {
    return Math.max(1, Math.ceil(ttlMs / 1000)) * 1000
  }

  grant(leaseMs: number, events: LeaseEvents): Lease<number> {
    const lease: FakeLease = {
      id: ++this.#leaseIds,
      leaseMs,
      events,
      alive: true,
      revoked: false,
      answer: leaseMs,
    }
    this.leases.set(lease.id, lease)
    const granted: Lease<number> = {
      id: Promise.resolve(lease.id),
      keepAliveOnce: async () => {
        this.keepAlives++
        await settle()
        if (lease.answer instanceof Error) throw lease.answer
        return lease.alive ? lease.answer : 0
      },
      revoke: async () => {
        lease.revoked = true
        this.#endLease(lease)
      },
    }
    if (this.requestsKeepAlive)
      granted.requestsKeepAlive = () => (typeof lease.answer === 'number' ? lease.answer : 0)
    return granted
  }

  /** The lease expires on the store: its entries go, and its keep-alive reports it lost. */
  expire(id: number): void {
    const lease = this.leases.get(id)!
    this.#endLease(lease)
    lease.events.lost(new Error(`lease ${id} expired`))
  }

  // --- QueueAdapter ---------------------------------------------------------------------------------------

  queueOf(key: string): string {
    return `${key}/`
  }

  nameOf(queue: string, lease: number, owner: string): string {
    return `${queue}${lease}-${owner}`
  }

  async enqueue(queue: string, name: string, value: string, lease: number, looksBack: number) {
    this.calls.push({ op: 'enqueue', name })
    const hold = this.holdNextWrite
    this.holdNextWrite = undefined
    await (hold ?? settle())
    const existing = this.entries.get(name)
    if (!existing && this.leases.get(lease)?.alive) {
      this.entries.set(name, { queue, name, value, lease, position: ++this.position })
    }
    if (this.loseNextReply) {
      this.loseNextReply = false
      throw new Error('reply lost')
    }
    const mine = this.entries.get(name)
    if (!mine) return { position: undefined }
    // As etcd's: the entries just before ours when our write landed in this step, else the head of the
    // line, which tells them only when ours is in it.
    const line = this.queue(queue)
    const at = line.indexOf(mine)
    if (!existing) return { position: mine.position, ahead: line.slice(Math.max(0, at - looksBack), at) }
    return { position: mine.position, ahead: at < looksBack ? line.slice(0, at) : undefined }
  }

  async check(entry: OwnEntry, looksBack: number, after?: bigint): Promise<QueueState<FakeEntry> | 'behind'> {
    this.calls.push({ op: after === undefined ? 'check' : 'check-after', name: entry.name })
    await settle()
    if (after !== undefined && this.replicaBehind) return 'behind'
    const before = this.queue(entry.queue).filter((e) => e.position < entry.position)
    return { ahead: before.slice(Math.max(0, before.length - looksBack)), mine: this.isMine(entry) }
  }

  async watch(entry: FakeEntry): Promise<Watch> {
    this.calls.push({ op: 'watch', name: entry.name })
    await settle()
    let cancelled = false
    const gone = new Promise<bigint | undefined>((resolve) =>
      this.#onDelete(entry.name, (position) => {
        if (!cancelled) resolve(position)
      }),
    )
    return {
      gone,
      cancel: () => {
        cancelled = true
      },
    }
  }

  async exists(entry: FakeEntry): Promise<boolean> {
    this.calls.push({ op: 'exists', name: entry.name })
    await settle()
    return this.entries.get(entry.name)?.position === entry.position
  }

  async read(entry: OwnEntry) {
    await settle()
    return { mine: this.isMine(entry), at: this.position }
  }

  watchHeld(entry: OwnEntry, _from: bigint, events: HeldEvents): Cancel {
    let cancelled = false
    // As etcd's watch from `from` on: a deletion before the watch was set is told too.
    if (!this.isMine(entry)) queueMicrotask(() => !cancelled && events.deleted(`${entry.name} deleted`))
    else
      this.#onDelete(entry.name, () => {
        if (!cancelled) events.deleted(`${entry.name} deleted`)
      })
    return {
      cancel: () => {
        cancelled = true
      },
    }
  }

  async remove(entry: OwnEntry): Promise<boolean> {
    this.calls.push({ op: 'remove', name: entry.name })
    await settle()
    this.#failDelete()
    if (!this.isMine(entry)) return false
    this.delete(entry.name)
    return true
  }

  async removeNames(names: readonly string[]): Promise<void> {
    this.calls.push({ op: 'removeNames' })
    await settle()
    this.#failDelete()
    for (const name of names) this.delete(name)
  }

  #failDelete() {
    if (this.failDeletes <= 0) return
    this.failDeletes--
    throw new Error('the leader changed')
  }

  async move(entry: OwnEntry, value: string, lease: number): Promise<boolean> {
    await settle()
    if (!this.isMine(entry)) return false
    this.entries.set(entry.name, { ...this.entries.get(entry.name)!, value, lease })
    return true
  }

  goneReason(): string {
    return 'its entry is gone'
  }

  async close(): Promise<void> {}

  // --- for tests -----------------------------------------------------------------------------------------

  /** The entries of `queue` in line (creation order). */
  queue(queue: string): FakeEntry[] {
    return [...this.entries.values()]
      .filter((e) => e.queue === queue)
      .sort((a, b) => (a.position < b.position ? -1 : 1))
  }

  /** Deletes an entry (as its owner's release, another client, or its lease's end would). */
  delete(name: string): void {
    if (!this.entries.delete(name)) return
    const position = ++this.position
    const listeners = this.#deletions.get(name) ?? []
    this.#deletions.delete(name)
    for (const listener of listeners) listener(position)
  }

  /** How many calls of `op` concerned entry `name`. */
  count(op: string, name: string): number {
    return this.calls.filter((c) => c.op === op && c.name === name).length
  }

  isMine(entry: OwnEntry): boolean {
    return this.entries.get(entry.name)?.position === entry.position
  }

  #onDelete(name: string, listener: (position: bigint) => void) {
    const listeners = this.#deletions.get(name) ?? []
    listeners.push(listener)
    this.#deletions.set(name, listeners)
  }

  #endLease(lease: FakeLease) {
    lease.alive = false
    for (const entry of [...this.entries.values()]) if (entry.lease === lease.id) this.delete(entry.name)
  }
}
