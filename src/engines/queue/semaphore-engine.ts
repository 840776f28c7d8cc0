/**
 * The queue engine's counting semaphore: a line of entries on a store, each holding the permits of one
 * acquire on a session's lease (session/pool.ts), beside a stored limit. An entry is granted when the
 * permits of every entry ahead of it plus its own fit under the limit (grants.ts `permitsFit`): strict FIFO
 * (an entry fits only if every entry ahead fits too), so a large request is never passed by smaller ones. Who is granted is decided
 * here from one consistent read of the line (the limit and the entries ahead, semaphore-adapter.ts); the
 * entry's position (the store's creation order, which never goes back) is the grant's sequence.
 *
 * - Acquire: one atomic step puts our entry, stores our limit if none is stored, and reads the line; a
 *   retried attempt reads. A stored limit other than ours (unless the core compared it already) is a
 *   `LimitMismatchError`, raised after our entry is in line: it is never a grant, it only counts ahead of
 *   later entries (they wait, never the reverse), until the core's abandon deletes it.
 * - Waiting: one watch per semaphore per client, on the whole line and its limit (any entry leaving, or a
 *   new limit, may admit us: watching one predecessor would miss those), shared by this client's waiters
 *   of that semaphore. A wait returns at once when the watch saw a change after its acquisition's latest
 *   read (or started after it), so that no change between a read and the next wait is missed; the core
 *   then reads again.
 * - Expiry: entries live on session leases; a dead holder's entry goes with its lease, on the store's clock.
 *   A grant's lease is what the session is known to keep, counted from the attempt's start.
 * - Release and abandon are the mutex's: an owner-checked delete, or deletes by name once every write has
 *   settled; a failed delete retires the session and is sent again (leftovers.ts).
 *
 * About 400 lines: an acquisition's steps (attempt, wait, extend, release, abandon) and the shared line
 * watch share its state and are read together, as in engine.ts. The mutex's engine is not reused: its
 * waiters watch one predecessor, which a semaphore's cannot (any entry ahead leaving may admit them).
 */
import { linkedAbort, raceSignal } from '../../core/abort.js'
import type { AcquireRequest, AttemptResult, ExtendResult, Grant } from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { LimitMismatchError } from '../../core/errors.js'
import type { SessionAdapter } from '../session/adapter.js'
import { type Session, SessionPool } from '../session/pool.js'
import type { Cancel } from './adapter.js'
import { permitsFit } from './grants.js'
import { Leftovers } from './leftovers.js'
import type { LineRead, PermitEntry, SemaphoreAdapter } from './semaphore-adapter.js'

const BUSY = { granted: false } as const
const QUEUED = { granted: false, queued: true } as const
const NOT_RENEWED = { renewed: false } as const

/**
 * The lease a `setLimit` stores a limit on when none is stored (nothing held or waited for, or the lease of
 * the limit's writer ended): the limit is kept while that session idles, then forgotten like any idle one.
 */
const SET_LIMIT_LEASE_MS = 15_000

/** One acquire, from its first attempt until released, lost or abandoned: the cookie of its grant. */
class PermitAcquisition<Id> {
  readonly names = new Set<string>()
  entry: PermitEntry | undefined
  session: Session<PermitAcquisition<Id>, Id> | undefined
  /** Sessions whose lease may carry our entry (each counts us as a user). */
  readonly on = new Set<Session<PermitAcquisition<Id>, Id>>()
  inflight: Promise<unknown> | undefined
  lost: AbortController | undefined
  ended = false
  /** The store's position of our latest read of the line: a wait returns at once on a change after it. */
  readAt = -1n
  /** The latest stored limit read: how many entries ahead the next read asks for. */
  limitSeen = 0
  /** The line watch this acquisition counts on while it waits. */
  channel: LineChannel | undefined
  constructor(
    readonly owner: string,
    readonly key: string,
    readonly line: string,
  ) {}
}

/** One watch on a semaphore's line, shared by this client's waiters of it. */
interface LineChannel {
  readonly line: string
  /** Changes after this position are seen (the watch's start). */
  readonly from: bigint
  /** The position of the latest change seen; -1 before any. */
  changedAt: bigint
  readonly wakers: Set<() => void>
  readonly users: Set<unknown>
  cancel: Cancel
}

export class QueueSemaphore<Id> {
  readonly #adapter: SemaphoreAdapter<Id>
  readonly #id: string
  readonly #pool: SessionPool<PermitAcquisition<Id>, Id>
  readonly #byOwner = new Map<string, PermitAcquisition<Id>>()
  readonly #channels = new Map<string, LineChannel>()
  readonly #leftovers = new Leftovers()
  readonly #closing = new AbortController()

  /** `id` names the store in a `LimitMismatchError`. */
  constructor(adapter: SemaphoreAdapter<Id>, leases: SessionAdapter<Id>, id: string) {
    this.#adapter = adapter
    this.#id = id
    this.#pool = new SessionPool(leases, (session, reason) => {
      for (const acq of [...session.users])
        if (acq.lost && acq.session === session) this.#lose(acq, reason.message)
    })
  }

  /** One attempt (`SemaphoreFacet.tryAcquire`). */
  async attempt(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const asked = req.semaphore
    if (!asked) throw new TypeError('A semaphore acquire carries `semaphore` (its limit and permits)')
    const started = now()
    let acq = this.#of(req)
    if (acq.entry !== undefined) {
      let gone = acq.session!.lost.aborted
      if (!gone) {
        const read = await raceSignal(this.#adapter.check(acq.entry, this.#cap(acq, asked.limit)), signal)
        gone = read.position !== acq.entry.position
        // Ours, but no limit stored any more (its writer's lease ended): the step below stores ours again.
        if (!gone && read.limit !== undefined) return await this.#decide(acq, req, read, started, signal)
      }
      if (gone) {
        // Our entry went with its lease (or was deleted): a new acquisition puts a new entry; the old
        // names and writes stay with abandon, in case.
        const { names, inflight } = acq
        this.#lose(acq, this.#adapter.goneReason())
        acq = this.#of(req)
        for (const name of names) acq.names.add(name)
        acq.inflight = inflight
      }
    }
    if (acq.entry === undefined) {
      const session = this.#sessionFor(this.#pool.leaseMs(req.ttlMs))
      // Counted at once: from the write on, our entry may be on this lease.
      this.#attach(acq, session)
      if (acq.session && acq.session !== session) this.#detach(acq, acq.session)
      acq.session = session
    }
    const lease = await raceSignal(acq.session!.id, signal)
    // Given up on meanwhile: send no write that abandon, perhaps under way already, would not wait for.
    signal.throwIfAborted()
    if (acq.ended) return BUSY
    const name = acq.entry?.name ?? this.#adapter.nameOf(acq.line, lease, req.owner)
    acq.names.add(name)
    const viaWrite = this.#pool.requestsKeepAlive(acq.session!)
    const refresh = viaWrite ? undefined : this.#pool.refresh(acq.session!, req.ttlMs)
    const sentAt = now()
    const value = {
      owner: req.owner,
      permits: asked.permits,
      limit: asked.limit,
      ...(req.holder === undefined ? {} : { holder: req.holder }),
    }
    const put = this.#adapter.enqueue(acq.line, name, value, lease, this.#cap(acq, asked.limit))
    // Kept for abandon: a delete by name is the last word only once every write has settled.
    const settled = put.then(
      () => {},
      () => {},
    )
    acq.inflight = acq.inflight ? Promise.all([acq.inflight, settled]) : settled
    const read = await raceSignal(put, signal)
    if (read.position === undefined) return BUSY
    if (viaWrite) this.#pool.answered(acq.session!, sentAt)
    acq.entry = { line: acq.line, name, position: read.position }
    if (refresh) await this.#pool.settle(refresh, signal)
    return await this.#decide(acq, req, read, started, signal)
  }

  /**
   * Waits for a change of the line (`waitForChange`): resolves when the line's watch saw one after this
   * acquisition's latest read, when its session is lost or `signal` aborts; the core then attempts again.
   */
  async wait(req: AcquireRequest, signal: AbortSignal): Promise<Grant | undefined> {
    const acq = this.#byOwner.get(req.owner)
    if (!acq || acq.ended || acq.entry === undefined || this.#closing.signal.aborted) return undefined
    const channel = this.#channelFor(acq)
    if (channel.from > acq.readAt + 1n || channel.changedAt > acq.readAt) return undefined
    const link = linkedAbort(signal, acq.session!.lost, this.#closing.signal)
    let wake: (() => void) | undefined
    try {
      await new Promise<void>((resolve) => {
        wake = resolve
        channel.wakers.add(resolve)
        if (link.signal.aborted) resolve()
        else link.signal.addEventListener('abort', () => resolve(), { once: true })
      })
    } finally {
      if (wake) channel.wakers.delete(wake)
      link.dispose()
    }
    return undefined
  }

  /** `extend`: a keep-alive of our entry's session beside a read that our entry is still there. */
  async extend(acq: PermitAcquisition<Id>, signal: AbortSignal): Promise<ExtendResult> {
    const start = now()
    if (acq.ended || acq.session!.lost.aborted) return NOT_RENEWED
    const session = acq.session!
    const [alive, mine] = await raceSignal(
      Promise.all([this.#pool.keepAlive(session), this.#adapter.read(acq.entry!)]),
      signal,
    )
    if (!alive || !mine) {
      this.#lose(acq, this.#adapter.goneReason())
      return NOT_RENEWED
    }
    return { renewed: true, ttlMs: session.aliveUntil - start }
  }

  /** `release`: an owner-checked delete of our entry (sent again if it fails, see leftovers.ts). */
  async release(acq: PermitAcquisition<Id>, signal: AbortSignal): Promise<boolean> {
    const sessions = [...acq.on]
    acq.ended = true
    acq.lost?.abort(new Error('released'))
    const entry = acq.entry
    const removed = entry === undefined ? undefined : this.#adapter.remove(entry)
    this.#end(acq)
    if (entry === undefined || removed === undefined) return false
    removed.catch(() => this.#leftovers.retry(() => this.#adapter.remove(entry), sessions))
    try {
      return await raceSignal(removed, signal)
    } catch (error) {
      for (const session of sessions) this.#pool.retire(session)
      throw error
    }
  }

  /** `abandon`: deletes whatever `req.owner` may have put, once its writes have settled. */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    const acq = this.#byOwner.get(req.owner)
    if (!acq) return
    const sessions = [...acq.on]
    acq.ended = true
    this.#leaveChannel(acq)
    const cleanUp = this.#leftovers.removeAbandoned({
      sessions,
      inflight: acq.inflight,
      names: () => [...acq.names],
      removeNames: (names) => this.#adapter.removeNames(names),
      retire: (session) => this.#pool.retire(session),
      end: () => this.#end(acq),
    })
    await raceSignal(cleanUp, signal)
  }

  /** `setLimit`: stores `limit` (on a session's lease when none is stored) and so wakes every waiter. */
  async setLimit(name: string, limit: number, signal: AbortSignal): Promise<void> {
    const session = this.#sessionFor(this.#pool.leaseMs(SET_LIMIT_LEASE_MS))
    // Counted while the write may land on its lease, then left to idle (its idle time keeps the limit).
    const user = new PermitAcquisition<Id>('', name, '')
    this.#pool.use(session, user)
    try {
      const lease = await raceSignal(session.id, signal)
      await raceSignal(this.#adapter.storeLimit(this.#adapter.lineOf(name), limit, lease), signal)
    } finally {
      this.#pool.leave(session, user)
    }
  }

  /** Ends every acquisition and wait, then revokes every lease (deleting our entries with them). */
  async close(): Promise<void> {
    this.#closing.abort(new Error('the lock backend was closed'))
    for (const acq of [...this.#byOwner.values()]) {
      acq.ended = true
      this.#leaveChannel(acq)
    }
    this.#byOwner.clear()
    this.#leftovers.close()
    await this.#adapter.close()
    await this.#pool.close()
  }

  /** Decides from one read of the line: granted, refused for want of permits, or a limit mismatch. */
  async #decide(
    acq: PermitAcquisition<Id>,
    req: AcquireRequest,
    first: LineRead,
    since: number,
    signal: AbortSignal,
  ): Promise<AttemptResult> {
    const asked = req.semaphore!
    let read = first
    const stored = read.limit ?? asked.limit
    acq.limitSeen = stored
    // Fewer entries read than the limit, and more ahead: read as many as the limit (a raised limit).
    if (!read.complete && read.ahead.length < stored) {
      read = await raceSignal(this.#adapter.check(acq.entry!, stored), signal)
      if (read.position !== acq.entry!.position) return BUSY
    }
    acq.readAt = read.at
    const limit = read.limit ?? asked.limit
    if (limit !== asked.limit && !asked.limitCompared) {
      throw new LimitMismatchError(limit, asked.limit, { key: req.key, backend: this.#id })
    }
    if (!read.complete || !permitsFit(read.ahead, asked.permits, limit)) return QUEUED
    return this.#grantOf(acq, since)
  }

  /** The grant: its lease is what the session is known to keep from `since` (the attempt's start). */
  #grantOf(acq: PermitAcquisition<Id>, since: number): AttemptResult {
    if (acq.ended) return BUSY
    this.#leaveChannel(acq)
    acq.lost ??= new AbortController()
    const session = acq.session!
    return {
      granted: true,
      fence: acq.entry!.position,
      ttlMs: Math.min(session.leaseMs, session.aliveUntil - since),
      cookie: acq,
      lost: acq.lost.signal,
    }
  }

  /** Entries to read ahead of ours: as many as the limit (more ahead than that: not granted anyway). */
  #cap(acq: PermitAcquisition<Id>, limit: number): number {
    return Math.max(limit, acq.limitSeen)
  }

  /** The line watch of `acq`'s semaphore, made from just after its latest read if there is none. */
  #channelFor(acq: PermitAcquisition<Id>): LineChannel {
    let channel = this.#channels.get(acq.line)
    if (!channel) {
      const made: LineChannel = {
        line: acq.line,
        from: acq.readAt + 1n,
        changedAt: -1n,
        wakers: new Set(),
        users: new Set(),
        cancel: { cancel: () => {} },
      }
      const wakeAll = () => {
        for (const wake of [...made.wakers]) wake()
      }
      made.cancel = this.#adapter.watch(acq.line, made.from, {
        changed: (at) => {
          if (at > made.changedAt) made.changedAt = at
          wakeAll()
        },
        failed: () => {
          // Ended by the store: the next wait makes another, from its own latest read.
          if (this.#channels.get(made.line) === made) this.#channels.delete(made.line)
          made.cancel.cancel()
          wakeAll()
        },
      })
      this.#channels.set(acq.line, made)
      channel = made
    }
    if (acq.channel !== channel) {
      this.#leaveChannel(acq)
      acq.channel = channel
      channel.users.add(acq)
    }
    return channel
  }

  /** `acq` no longer waits: the line's watch is cancelled with its last waiter. */
  #leaveChannel(acq: PermitAcquisition<Id>): void {
    const channel = acq.channel
    acq.channel = undefined
    if (!channel || !channel.users.delete(acq) || channel.users.size > 0) return
    if (this.#channels.get(channel.line) === channel) this.#channels.delete(channel.line)
    channel.cancel.cancel()
    for (const wake of [...channel.wakers]) wake()
  }

  #of(req: AcquireRequest): PermitAcquisition<Id> {
    const existing = this.#byOwner.get(req.owner)
    if (existing && !existing.ended) return existing
    const acq = new PermitAcquisition<Id>(req.owner, req.key, this.#adapter.lineOf(req.key))
    this.#byOwner.set(req.owner, acq)
    return acq
  }

  #sessionFor(leaseMs: number) {
    this.#closing.signal.throwIfAborted()
    return this.#pool.session(leaseMs)
  }

  #attach(acq: PermitAcquisition<Id>, session: Session<PermitAcquisition<Id>, Id>): void {
    if (acq.on.has(session)) return
    acq.on.add(session)
    this.#pool.use(session, acq)
  }

  #detach(acq: PermitAcquisition<Id>, session: Session<PermitAcquisition<Id>, Id>): void {
    if (acq.on.delete(session)) this.#pool.leave(session, acq)
  }

  #end(acq: PermitAcquisition<Id>): void {
    acq.ended = true
    this.#leaveChannel(acq)
    if (this.#byOwner.get(acq.owner) === acq) this.#byOwner.delete(acq.owner)
    for (const session of [...acq.on]) this.#detach(acq, session)
  }

  #lose(acq: PermitAcquisition<Id>, reason: string): void {
    if (acq.ended) return
    acq.lost?.abort(new Error(reason))
    this.#end(acq)
  }
}

export type { PermitAcquisition }
