/**
 * The session engine: keep-alive leases, one per lease length, pooled and counted, each with `aliveUntil`
 * (how long the store is known to keep it) and a `lost` signal. etcd's Go `concurrency/session.go` is the
 * model: a lease the client keeps alive, whose keys go with it when the client dies.
 *
 * - A session counts its users: whatever may have something on its lease (for the queue-lock engine:
 *   acquires under way, whose write may be landing, waiters in line and holders). A user is counted once
 *   per session its entry may be on (two while an entry moves between leases).
 * - Idle retirement: a session without users for `idleMs(ttl)` is revoked and dropped, so a client that
 *   used a hundred ttls keeps a hundred leases alive only while it uses them.
 * - A session whose lease the store says is gone, or that its user retired (a clean-up failed: an entry we
 *   could not delete may still be on its lease), takes no new users: it is revoked as soon as its last
 *   user leaves, which deletes whatever was left on it (or, if the store stays unreachable, the lease is no
 *   longer kept alive and expires after its ttl).
 * - A session of its own (`own`): one lock's alone (a lock to be handed on with its token, whose lease
 *   nobody else's keys may share), never handed to another user, revoked as soon as its user leaves. Once
 *   its lock is handed on (`handOver`, or `adopt`: a lease another client granted) it is kept alive only by
 *   its lock's renewals (`keepAlive`), never by itself, and `close` leaves it on the store: another process
 *   may go on with it.
 * - `aliveUntil` is what the store is known to keep: the send time (monotonic clock) of the latest
 *   acknowledged grant or keep-alive plus the ttl the store answered with. Nothing on the lease is valid
 *   beyond it.
 *
 * Adapter: `SessionAdapter` (adapter.ts). Used by: etcd and ZooKeeper, through the queue-lock engine.
 */
import { raceSignal } from '../../core/abort.js'
import { now } from '../../core/clock.js'
import type { Lease, SessionAdapter } from './adapter.js'

export interface Session<User, Id> {
  readonly leaseMs: number
  readonly id: Promise<Id>
  /** Aborts when the store says the lease is gone (revoked, expired, or never granted). */
  readonly lost: AbortSignal
  /** Until when (our monotonic clock) the store keeps the lease at least; see the header. */
  readonly aliveUntil: number
  /** Whatever may have something on this lease that we still count on. */
  readonly users: ReadonlySet<User>
  /** Revoked by us (no user left, or closing): no longer kept alive, so nothing on it outlives its ttl. */
  readonly revoked: boolean
  /** One lock's alone (see the header). */
  readonly own: boolean
}

/**
 * How long a session may sit without users before it is revoked: one ttl, between 2 s and 30 s.
 *
 * A lock taken again within about a ttl of its release (a periodic job, a retry loop, a queue of short
 * jobs) reuses the lease instead of paying a grant (a raft write, fsynced) and later a revoke (another)
 * each time; an idle lease costs only a keep-alive every ttl/3, answered by the leader without a raft
 * round, so idling one ttl costs about three of those. At least 2 s, so that bursts of 1 s locks do not
 * churn leases; at most 30 s, so that long ttls used once (an hour, a day) do not linger for that long.
 */
export const idleMs = (leaseMs: number): number => Math.min(Math.max(leaseMs, 2000), 30_000)

/** How much of a lease must remain beyond a lock's ttl before an acquire or extend skips refreshing it. */
const REFRESH_SLACK_MS = 50

/** How long a grant or a move waits for the keep-alive sent beside it before going on without. */
const REFRESH_WAIT_MS = 1000

/** How long close() waits for the store to answer its revokes (a revoke is a raft write: milliseconds). */
const CLOSE_REVOKE_WAIT_MS = 2000

class Entry<User, Id> implements Session<User, Id> {
  readonly leaseMs: number
  readonly lease: Lease<Id>
  readonly id: Promise<Id>
  readonly #lost = new AbortController()
  aliveUntil = Number.NEGATIVE_INFINITY
  readonly users = new Set<User>()
  /** Since when it has had no user, and the timer that checks it (armed once per idle spell). */
  idleSince = now()
  timer: NodeJS.Timeout | undefined
  /** The next keep-alive the engine sends itself (adapters with `keepAliveEveryMs`). */
  beat: NodeJS.Timeout | undefined
  retiring = false
  revoked = false
  own = false
  /** Its lock was handed on: kept alive only by `keepAlive`, and left on the store at close. */
  handedOver = false

  /** `adopted`: the id of a lease another client granted, instead of a new grant. */
  constructor(
    leaseMs: number,
    adapter: SessionAdapter<Id>,
    onLost: (entry: Entry<User, Id>, reason: Error) => void,
    adopted?: { readonly id: Id },
  ) {
    this.leaseMs = leaseMs
    const grantedFrom = now()
    const events = {
      acknowledged: (sentAt: number, ttlMs: number) => this.acknowledged(sentAt, ttlMs),
      lost: (reason: Error) => onLost(this, reason),
    }
    if (adopted) {
      if (!adapter.adopt) throw new Error('this store cannot keep alive a lease another client granted')
      // Nothing is known of it until a keep-alive is answered; none is sent by itself.
      this.lease = adapter.adopt(adopted.id, events)
      this.id = this.lease.id
      return
    }
    this.lease = adapter.grant(leaseMs, events)
    this.id = this.lease.id
    this.id.then(
      () => {
        const grantedMs = this.lease.grantedMs?.() ?? leaseMs
        this.acknowledged(grantedFrom, grantedMs)
        // Paced by the length granted: a store that grants less than asked (ZooKeeper's
        // maxSessionTimeout) would otherwise see keep-alives too rare to keep the lease known alive.
        const everyMs = adapter.keepAliveEveryMs?.(grantedMs)
        if (everyMs !== undefined) this.#beat(everyMs)
      },
      () => {},
    )
  }

  /**
   * One keep-alive every `everyMs`, one at a time, until the lease is revoked or lost: each answer is an
   * acknowledgement from its send time; a failure is none (the lease's validity then runs out by itself).
   */
  #beat(everyMs: number) {
    if (this.revoked || this.handedOver || this.#lost.signal.aborted) return
    this.beat = setTimeout(() => {
      const sentAt = now()
      this.lease.keepAliveOnce().then(
        (ttlMs) => {
          if (ttlMs > 0) this.acknowledged(sentAt, ttlMs)
          this.#beat(everyMs)
        },
        () => this.#beat(everyMs),
      )
    }, everyMs)
    // A lease kept alive never keeps the process alive by itself.
    this.beat.unref()
  }

  get lost(): AbortSignal {
    return this.#lost.signal
  }

  /** Replies come in the order the keep-alives were sent, but a late one never moves the deadline back. */
  acknowledged(sentAt: number, ttlMs: number) {
    this.aliveUntil = Math.max(this.aliveUntil, sentAt + ttlMs)
  }

  markLost(reason: Error) {
    clearTimeout(this.beat)
    this.#lost.abort(reason)
  }
}

/** The sessions of one client, per lease length. */
export class SessionPool<User, Id> {
  readonly #adapter: SessionAdapter<Id>
  readonly #onLost: (session: Session<User, Id>, reason: Error) => void
  readonly #idleMs: (leaseMs: number) => number
  /** The session new users get, per lease length. */
  readonly #current = new Map<number, Entry<User, Id>>()
  /** Every session not revoked yet (current ones and retiring ones), for close(). */
  readonly #open = new Set<Entry<User, Id>>()

  /**
   * `onLost` runs when a session's lease is reported gone (after its `lost` aborted). `idle` replaces
   * `idleMs` (tests).
   */
  constructor(
    adapter: SessionAdapter<Id>,
    onLost: (session: Session<User, Id>, reason: Error) => void,
    idle: (leaseMs: number) => number = idleMs,
  ) {
    this.#adapter = adapter
    this.#onLost = onLost
    this.#idleMs = idle
  }

  /** The lease length used for a lock of `ttlMs`. */
  leaseMs(ttlMs: number): number {
    return this.#adapter.leaseMs(ttlMs)
  }

  /** The session for leases of `leaseMs` (granted on first use, replaced once lost or retiring). */
  session(leaseMs: number): Session<User, Id> {
    const existing = this.#current.get(leaseMs)
    if (existing && !existing.retiring && !existing.lost.aborted) return existing
    return this.#grant(leaseMs)
  }

  /**
   * A session of its own for one lock (see the header), granted now; `adopted`: the lease of that id,
   * granted by another client, whose lock is resumed here (handed over already).
   */
  own(leaseMs: number, adopted?: { readonly id: Id }): Session<User, Id> {
    const entry = new Entry<User, Id>(
      leaseMs,
      this.#adapter,
      (lost, reason) => this.#lost(lost, reason),
      adopted,
    )
    entry.own = true
    entry.handedOver = adopted !== undefined
    this.#open.add(entry)
    return entry
  }

  /**
   * The lock on `session` (its own) is handed on with a token: from now on only its renewals keep the lease
   * alive (a lost handle stops keeping it, as on every store), and `close` leaves it on the store.
   */
  handOver(session: Session<User, Id>): void {
    const entry = session as Entry<User, Id>
    if (!entry.own) throw new Error('only a session of its own can be handed over')
    entry.handedOver = true
    clearTimeout(entry.beat)
    entry.lease.stopKeepAlive?.()
  }

  /** Counts `user` on `session`. Call it in the same turn as `session()`, before any await. */
  use(session: Session<User, Id>, user: User): void {
    ;(session as Entry<User, Id>).users.add(user)
  }

  /** Stops counting `user`; an idle session is retired after a while (at once if it is retiring already). */
  leave(session: Session<User, Id>, user: User): void {
    const entry = session as Entry<User, Id>
    if (!entry.users.delete(user) || entry.users.size > 0 || entry.revoked) return
    // One lock's lease: that lock is done with it (released, lost, abandoned).
    if (entry.retiring || entry.own) {
      void this.#revoke(entry)
      return
    }
    entry.idleSince = now()
    if (!entry.timer) this.#arm(entry, this.#idleMs(entry.leaseMs))
  }

  /** No new user gets this session: it is revoked once its last user leaves. */
  retire(session: Session<User, Id>): void {
    const entry = session as Entry<User, Id>
    if (entry.revoked) return
    entry.retiring = true
    if (this.#current.get(entry.leaseMs) === entry) this.#current.delete(entry.leaseMs)
    if (entry.users.size === 0) void this.#revoke(entry)
  }

  /** One keep-alive now; true if the store still has the lease (and aliveUntil moved). */
  async keepAlive(session: Session<User, Id>): Promise<boolean> {
    const entry = session as Entry<User, Id>
    const sentAt = now()
    const ttlMs = await entry.lease.keepAliveOnce()
    if (ttlMs <= 0) return false
    entry.acknowledged(sentAt, ttlMs)
    return true
  }

  /** Whether an answered request on `session`'s lease is a keep-alive too (`Lease.requestsKeepAlive`). */
  requestsKeepAlive(session: Session<User, Id>): boolean {
    return (session as Entry<User, Id>).lease.requestsKeepAlive !== undefined
  }

  /**
   * A request on `session`'s lease, sent at `sentAt` (monotonic clock, taken before the send) and answered
   * with success, as an acknowledged keep-alive, where the lease says requests count as such (a no-op
   * elsewhere). Only a success counts: an error may come from the client, without the store's word.
   */
  answered(session: Session<User, Id>, sentAt: number): void {
    const entry = session as Entry<User, Id>
    const ttlMs = entry.lease.requestsKeepAlive?.(sentAt)
    if (ttlMs !== undefined && ttlMs > 0) entry.acknowledged(sentAt, ttlMs)
  }

  /**
   * A lease that the store is known to keep for less than `needMs` is kept alive now, in parallel with
   * whatever the caller sends next (no extra wait), so a grant can count its full ttl from before its
   * request. Undefined when the lease is known to last long enough. Hand the result to `settle`.
   */
  refresh(session: Session<User, Id>, needMs: number): Promise<unknown> | undefined {
    if (session.aliveUntil - now() >= needMs + REFRESH_SLACK_MS) return undefined
    return this.keepAlive(session).catch(() => false)
  }

  /**
   * Waits for a `refresh` at most REFRESH_WAIT_MS (never rejects unless `signal` aborts): without it (lease
   * gone, store unreachable, a keep-alive that never answers) a grant is only as long as the lease is known
   * to live, and a keep-alive that does not answer must not hold the grant back.
   */
  async settle(refresh: Promise<unknown>, signal: AbortSignal): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, REFRESH_WAIT_MS)
    })
    await raceSignal(Promise.race([refresh, late]), signal).finally(() => clearTimeout(timer))
  }

  /**
   * Revokes every lease (removing everything still on one: what a crash would do after the ttl), waiting
   * for the store's answers CLOSE_REVOKE_WAIT_MS at most: the keep-alives stop first, so a lease whose
   * revoke goes unanswered ends by its ttl all the same, and close() must return. A lease handed on is left
   * to the holders of its token: nothing keeps it alive here any more.
   */
  async close(): Promise<void> {
    const revoked = Promise.allSettled(
      [...this.#open].map((entry) => (entry.handedOver ? this.#forget(entry) : this.#revoke(entry))),
    )
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, CLOSE_REVOKE_WAIT_MS)
    })
    await Promise.race([revoked, late]).finally(() => clearTimeout(timer))
  }

  #grant(leaseMs: number): Entry<User, Id> {
    const entry = new Entry<User, Id>(leaseMs, this.#adapter, (lost, reason) => this.#lost(lost, reason))
    this.#current.set(leaseMs, entry)
    this.#open.add(entry)
    return entry
  }

  #lost(entry: Entry<User, Id>, reason: Error) {
    if (entry.revoked) return
    // Never handed out again; revoked (a no-op on the store by now) once its users have left.
    entry.retiring = true
    if (this.#current.get(entry.leaseMs) === entry) this.#current.delete(entry.leaseMs)
    entry.markLost(reason)
    this.#onLost(entry, reason)
    if (entry.users.size === 0) void this.#revoke(entry)
  }

  #revoke(entry: Entry<User, Id>) {
    if (entry.revoked) return
    entry.revoked = true
    clearTimeout(entry.timer)
    clearTimeout(entry.beat)
    if (this.#current.get(entry.leaseMs) === entry) this.#current.delete(entry.leaseMs)
    this.#open.delete(entry)
    // Revoking stops the keep-alives first, so even a revoke that never reaches the store ends the lease
    // (after its ttl). Nothing we count on is on it: every user has left.
    return entry.lease.revoke()
  }

  /** Stops counting on a lease handed on, leaving it on the store (its keep-alives stopped at the hand-over). */
  #forget(entry: Entry<User, Id>) {
    entry.revoked = true
    clearTimeout(entry.timer)
    clearTimeout(entry.beat)
    this.#open.delete(entry)
  }

  /** Checks an idle session when its timer fires: revoked if still idle, else left (or re-armed). */
  #check(entry: Entry<User, Id>) {
    entry.timer = undefined
    if (entry.users.size > 0 || entry.revoked) return
    const left = entry.idleSince + this.#idleMs(entry.leaseMs) - now()
    if (left > 0) {
      this.#arm(entry, left)
      return
    }
    void this.#revoke(entry)
  }

  // One timer per idle spell, not per lock cycle: a lock released and taken again within the idle time
  // (the common case) moves idleSince and the timer re-arms itself for the remainder when it fires.
  #arm(entry: Entry<User, Id>, ms: number) {
    entry.timer = setTimeout(() => this.#check(entry), ms)
    // An idle session never keeps the process alive.
    entry.timer.unref()
  }
}
