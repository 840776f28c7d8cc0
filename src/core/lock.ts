/**
 * A held lock: the handle the caller gets (key, owner, fence, validity, the lost signal, extend, release).
 * Extends and the release run one at a time on its queue; its renewer (renewer.ts) decides when to extend,
 * and the renewals of a client's locks due together go out as one request where the backend has
 * `extendMany`.
 */
import type { ExtendOutcome, HeldLease, LeaseFacet, LockBackend } from './backend.js'
import { now, withTimeout } from './clock.js'
import { channels, type LossReason, publish } from './diagnostics.js'
import {
  BackendUnavailableError,
  CapabilityError,
  LockError,
  LockLostError,
  LockReleasedError,
  type Primitive,
  subjectOf,
} from './errors.js'
import { checkLimits, parseTtl, validUntil } from './options.js'
import { Renewals, Renewer } from './renewer.js'
import { encodeToken } from './token.js'

/** A held lock. Release it (or use `await using`); until then it renews itself unless `renew: false`. */
export interface Lock extends AsyncDisposable {
  /** The key this lock holds. */
  readonly key: string
  /** A random 128-bit id naming this holder. */
  readonly owner: string
  /**
   * The fencing token: strictly greater than the fence of every earlier grant of this key. Pass it to the
   * protected resource and have it reject writes with a fence lower than the highest it has seen.
   */
  readonly fence: bigint
  /**
   * Until when (on `performance.now()`'s clock) the lease is certainly ours, conservatively: measured from
   * before the request was sent, less the drift margin. Renewals move it forward.
   */
  readonly validUntil: number
  /** How long the lease is still certainly ours, in ms (`validUntil - performance.now()`, at least 0). */
  readonly remainingMs: number
  /**
   * Aborts with a `LockLostError` when the lease is lost. Not aborted by a normal release. Read after
   * `validUntil`, it is aborted already (even before a busy event loop runs the expiry timer): check
   * `aborted` before adding an `'abort'` listener, which an aborted signal never calls, and do both on ONE
   * read (`const lost = lock.signal`): a second read past validUntil would abort it in between.
   */
  readonly signal: AbortSignal
  /**
   * Extends the lease to `ttl` from now (the lock's ttl by default). Resolves with the lease granted, in
   * whole ms from the extend's start: `ttl`, or less where the store keeps less than asked (a ZooKeeper
   * lock's session timeout caps it; the store never keeps more). `validUntil` and `remainingMs` count that,
   * never `ttl`: compare before relying on a longer ttl than the store was seen to keep.
   * @example
   * if ((await lock.extend('20s')) < 20_000) console.warn('the store kept less: renew sooner, or stop')
   * @throws {LockReleasedError} after `release()`
   * @throws {LockLostError} when the lease is no longer ours
   * @throws {BackendUnavailableError} when the outcome is unknown: the store may keep the old lease or the
   * new one, so `validUntil` becomes the earlier of the two ends (a shorter `ttl` that may have landed
   * shortens it), and the lease stays ours until then; renewals retry with `ttl`
   */
  extend(ttl?: number | string): Promise<number>
  /**
   * This lock as a string that another process (or this one after a restart) hands to `locks.resume(token)`
   * to go on renewing and release it. It names the store, the key, the owner id and the fence, and holds no
   * store credentials; but the owner id is the ownership: whoever has the token can renew or release the
   * lock, so keep it as a secret. From then on this handle shares the lease: it still renews, but only its
   * `release()` releases it (not its expiry here, not the client's `close()`), since another process may go
   * on with it. See docs/resume.md.
   * @example
   * const token = lock.token()   // hand it to the process that goes on
   * @throws {CapabilityError} on a backend that cannot hand a lease to another process (docs/resume.md)
   * @throws {LockReleasedError} after `release()`
   * @throws {LockLostError} once the lease is lost
   */
  token(): string
  /**
   * Releases the lock; idempotent. Resolves even when the lease had already been lost.
   * @throws {BackendUnavailableError} when the store could not be reached; the lease then ends by its ttl
   */
  release(): Promise<void>
}

export interface LockContext {
  readonly backend: LeaseFacet
  readonly driftFactor: number
  /** The client's timer for every lock it holds (`lockRenewals()`). */
  readonly renewals: Renewals<LockHandle>
  /** Called once when the lock stops being held (released or lost). */
  readonly onSettled: (lock: LockHandle) => void
  /** What the lease is, for messages: a lock (the default), or the leadership of an election. */
  readonly primitive?: Primitive | undefined
}

type State = 'held' | 'lost' | 'released'

/** A confirmed extend: the lease the store keeps from its start (at most the ttl asked). */
interface Renewed {
  readonly grantedMs: number
}

type ExtendSettled = Renewed | 'lost' | 'released' | { error: unknown }

/**
 * The most renewals sent in one turn of the event loop. A client holding tens of thousands of locks can
 * have them all come due at once (renewal slots merge behind a stalled event loop): sent and settled in
 * one synchronous burst, they stalled it again for hundreds of ms, long enough for the next slots to
 * merge too. A turn sends this many (a few EXTEND_MANY on Redis), and the rest follow turn by turn, each
 * chunk's validity counted from its own start; a lock released or lost meanwhile is skipped.
 */
const RENEW_CHUNK = 1000

/** The renewal timer of one client's locks: one per client, shared by every lock it holds. */
export function lockRenewals(): Renewals<LockHandle> {
  return LockHandle.newRenewals()
}

export class LockHandle implements Lock {
  readonly key: string
  readonly owner: string
  readonly fence: bigint
  readonly #ctx: LockContext
  /** Made on first use of `signal` (or at loss): most locks are released without anyone reading it. */
  #lost: AbortController | undefined
  #cookie: unknown
  /** What extend and release are handed: made again only when the cookie changes. */
  #heldLease: HeldLease
  #ttlMs: number
  #validUntil: number
  #state: State = 'held'
  /** Its timers: renewal every ttl/3 (unless `renew: false`) and the local expiry at validUntil. */
  readonly #renewer: Renewer<LockHandle>
  /**
   * Extends and the release run one after another on this chain: no renewal ever follows a release.
   * Undefined until the first extend: most locks are released without one, and awaiting an empty chain
   * would cost the release a turn.
   */
  #queue: Promise<unknown> | undefined
  #releasing: Promise<void> | undefined

  /**
   * Whether another handle may hold this lease too: a token was made of it, or it was resumed from one. It
   * is then released only by `release()`: never in the background when it expires here, nor by `close()`.
   */
  #shared: boolean
  /** Stops listening to the backend's session-lost signal (a shared signal must not keep us). */
  #detachLost: (() => void) | undefined
  /** The renewal in flight, if any: aborted when the lock is declared lost. */
  #stopRenewal: AbortController | undefined

  /** The renewals of one client, seen through these hooks: one object for all of its locks. */
  static newRenewals(): Renewals<LockHandle> {
    return new Renewals<LockHandle>({
      held: (lock) => lock.#state === 'held',
      validUntil: (lock) => lock.#validUntil,
      ttlMs: (lock) => lock.#ttlMs,
      renew: (locks) => LockHandle.#renewAll(locks),
      expire: (lock) => lock.#expireLocally(),
    })
  }

  constructor(
    ctx: LockContext,
    lease: HeldLease,
    grant: { ttlMs: number; validUntil: number; lost?: AbortSignal | undefined; shared?: boolean },
    renew: boolean,
  ) {
    this.#ctx = ctx
    this.#shared = grant.shared ?? false
    this.key = lease.key
    this.owner = lease.owner
    this.fence = lease.fence
    this.#cookie = lease.cookie
    this.#heldLease = lease
    this.#ttlMs = grant.ttlMs
    this.#validUntil = grant.validUntil
    this.#renewer = new Renewer(this, ctx.renewals, renew)
    this.#renewer.arm()
    const lost = grant.lost
    if (lost) {
      const onLost = () =>
        this.#markLost(
          new LockLostError(
            `${this.#Subject} on ${this.#ctx.backend.id} was lost: ${(lost.reason as Error)?.message ?? 'its session ended'}`,
            this.#context(lost.reason),
          ),
          'session_ended',
        )
      // Lost already (a key of an atomic set, between its grant and the take): an 'abort' listener would
      // never hear it. Lost once the one who made the handle has it (a microtask: it may still add it to
      // its held locks), before its caller resumes.
      if (lost.aborted) queueMicrotask(onLost)
      else {
        lost.addEventListener('abort', onLost, { once: true })
        this.#detachLost = () => lost.removeEventListener('abort', onLost)
      }
    }
  }

  get validUntil(): number {
    return this.#validUntil
  }

  get remainingMs(): number {
    return this.#state === 'held' ? Math.max(0, this.#validUntil - now()) : 0
  }

  get signal(): AbortSignal {
    // Read past the validity before the expiry timer ran (a blocked event loop runs timers late): the
    // lease is lost already, and a holder that checks the signal must hear it now, not after its next await.
    if (this.#state === 'held' && now() >= this.#validUntil) this.#expireLocally()
    this.#lost ??= new AbortController()
    return this.#lost.signal
  }

  get #lease(): HeldLease {
    if (this.#heldLease.cookie !== this.#cookie) {
      this.#heldLease = { key: this.key, owner: this.owner, fence: this.fence, cookie: this.#cookie }
    }
    return this.#heldLease
  }

  /** "lock 'k'", or "leadership of election 'k'": what the messages speak of. */
  get #subject(): string {
    return subjectOf(this.#ctx.primitive, this.key)
  }

  get #Subject(): string {
    const subject = this.#subject
    return subject[0]!.toUpperCase() + subject.slice(1)
  }

  #context(cause?: unknown) {
    return { key: this.key, backend: this.#ctx.backend.id, cause }
  }

  /** The loss of a lock whose validity passed without a confirmed renewal. */
  #expired(): LockLostError {
    return new LockLostError(
      `${this.#Subject} on ${this.#ctx.backend.id} passed its validity without a confirmed renewal; ` +
        'treat it as lost (the store may be unreachable, or the process was paused)',
      this.#context(),
    )
  }

  /** The renewer saw validUntil pass without a confirmed renewal. */
  #expireLocally(): void {
    this.#markLost(this.#expired(), 'expired')
    // We no longer count on it, so nobody should wait for it: where the store still keeps it (a session
    // that stays alive while this process does, as etcd's; a store clock a little slower than ours), take
    // it back. Owner-checked, so it never touches a later holder; in the background, errors ignored. Not
    // a lease shared through its token: the other handle may still be renewing it.
    if (this.#shared) return
    const lease = this.#lease
    withTimeout(this.#ttlMs, (signal) => this.#ctx.backend.release(lease, signal)).catch(() => {})
  }

  #markLost(error: LockLostError, reason: LossReason): void {
    if (this.#state !== 'held') return
    this.#state = 'lost'
    this.#renewer.stop()
    this.#stopRenewal?.abort(error)
    this.#detachLost?.()
    this.#ctx.onSettled(this)
    publish(channels.lost, () => ({ ...this.#diag(), reason, error }))
    this.#lost ??= new AbortController()
    this.#lost.abort(error)
  }

  #diag() {
    return { key: this.key, backend: this.#ctx.backend.id, owner: this.owner, fence: this.fence }
  }

  /**
   * One extend against the store, serialised on the queue. Returns the outcome; never rejects. Without
   * `ttlMs` (a renewal), it asks for the lock's ttl as of when it runs: a renewal that came due while a
   * caller's extend to another ttl was under way must not undo it.
   */
  #extendOnce(askedMs?: number): Promise<ExtendSettled> {
    const run = async (): Promise<ExtendSettled> => {
      if (this.#state !== 'held') return this.#state
      const ttlMs = askedMs ?? this.#ttlMs
      const start = now()
      const deadline = this.#validUntil
      let outcome: ExtendOutcome
      try {
        // Past validUntil the answer no longer matters: the lease is lost locally either way.
        const lease = this.#lease
        // Also given up the moment the lock is declared lost (#markLost): the expiry fires at the same
        // instant as this timeout and first, and the release that follows a loss must find this renewal
        // already given up (a backend that runs one connection's statements in order takes a given-up
        // statement as the sign of a dead connection, and sends the release elsewhere).
        outcome = await withTimeout(deadline - start, async (signal, controller) => {
          this.#stopRenewal = controller
          try {
            return await this.#ctx.backend.extend(lease, ttlMs, signal)
          } finally {
            // Before the pooled controller goes back for another operation to use.
            this.#stopRenewal = undefined
          }
        })
      } catch (error) {
        outcome = { error }
      }
      // Nothing waits behind it: the next renewal may go out in a batch again.
      if (this.#queue === result) this.#queue = undefined
      return this.#settle(start, deadline, ttlMs, outcome)
    }
    const result: Promise<ExtendSettled> = (this.#queue ?? Promise.resolve()).then(run)
    this.#queue = result
    return result
  }

  /**
   * What an extend sent at `start`, when the validity was `deadline`, asking for `ttlMs`, came to:
   * `outcome` is the store's answer, or `{ error }` when unknown. Updates the lease and the lost signal.
   */
  #settle(start: number, deadline: number, ttlMs: number, outcome: ExtendOutcome): ExtendSettled {
    // Given up because the lock was declared lost (or released) meanwhile: that is the outcome.
    if (this.#state !== 'held') return this.#state
    if ('error' in outcome) {
      const { error } = outcome
      // Unknown: the store keeps either the lease it had or the one this request asked for (it may have
      // landed), so only the earlier end of the two is certainly ours. Never the old end alone: a
      // shorter extend that landed with its reply lost would let a waiter in while we still act.
      this.#validUntil = Math.min(this.#validUntil, validUntil(start, ttlMs, this.#ctx.driftFactor))
      // The store may now keep this ttl: renewals ask for it, and make the outcome known again.
      this.#ttlMs = ttlMs
      publish(channels.extend, () => ({ ...this.#diag(), outcome: 'unknown', error }))
      publish(channels.storeError, () => ({ ...this.#diag(), operation: 'extend', error }))
      return { error }
    }
    // The timeout above and the reply can become due in the same turn of a busy event loop, and the
    // reply may be processed first: a confirmation that lands after validUntil came too late all the
    // same. The holder was owed the loss signal by then (the lock was not valid in between), so the
    // renewal must not quietly revive it.
    if (now() >= deadline) {
      this.#expireLocally()
      return 'lost'
    }
    if (!outcome.renewed) {
      publish(channels.extend, () => ({ ...this.#diag(), outcome: 'lost' }))
      this.#markLost(
        new LockLostError(
          `${this.#Subject} on ${this.#ctx.backend.id} was lost: the store no longer has it under our owner ` +
            '(it expired or was taken over)',
          this.#context(),
        ),
        'not_owner',
      )
      return 'lost'
    }
    if (outcome.cookie !== undefined) this.#cookie = outcome.cookie
    this.#ttlMs = ttlMs
    // Never more than the store keeps: a store may hold the lease for less than asked (a session's
    // lease, a cap), and believing the longer one would let a successor in while we still act.
    const kept = outcome.ttlMs === undefined ? ttlMs : Math.min(ttlMs, outcome.ttlMs)
    // Assigned, not maxed: a shorter extend shortens the lease on the store too. Extends run one at
    // a time, so this is the store's latest word.
    this.#validUntil = validUntil(start, kept, this.#ctx.driftFactor)
    const grantedMs = Math.floor(kept)
    // Built in one piece: with a subscriber, this runs once per renewal of every held lock.
    publish(channels.extend, () => ({
      key: this.key,
      backend: this.#ctx.backend.id,
      owner: this.owner,
      fence: this.fence,
      outcome: 'renewed',
      grantedMs,
    }))
    return { grantedMs }
  }

  /** The renewal the renewer asked for: one extend of its own. */
  #renewOnce(): void {
    this.#extendOnce().then((outcome) => this.#renewed(outcome))
  }

  /** A renewal's outcome, for the renewer: the next one in ttl/3, or soon after an unknown outcome. */
  #renewed(outcome: ExtendSettled): void {
    if (this.#state !== 'held') return
    if (typeof outcome === 'object' && 'grantedMs' in outcome) this.#renewer.arm()
    else this.#renewer.unknown()
  }

  /**
   * The renewals of a client's locks that came due together: one request where the backend has
   * `extendMany` (and more than one lock has no extend of its own under way), else one extend each.
   */
  static #renewAll(due: LockHandle[]): void {
    const backend = due[0]!.#ctx.backend
    let locks = due
    if (due.length > RENEW_CHUNK) {
      // The rest in a later turn, after the replies and other work that came in meanwhile.
      setImmediate(() => LockHandle.#renewAll(due.slice(RENEW_CHUNK)))
      locks = due.slice(0, RENEW_CHUNK)
    }
    const batch: LockHandle[] = []
    for (const lock of locks) {
      if (lock.#state !== 'held') continue
      // A caller's extend under way: this renewal queues behind it, as extends of one lock always do.
      if (backend.extendMany && !lock.#queue) batch.push(lock)
      else lock.#renewOnce()
    }
    if (batch.length === 1) batch[0]!.#renewOnce()
    else if (batch.length > 1) LockHandle.#extendBatch(backend, batch)
  }

  /**
   * One `extendMany` for `locks` (all held, none with an extend under way), each lock's validity counted
   * from the batch's start. Every lock's queue holds the batch until it settles, so a release waits for
   * it, and no renewal is sent for a lock whose release has begun (its state is no longer 'held').
   */
  static #extendBatch(backend: LeaseFacet, locks: LockHandle[]): void {
    const count = locks.length
    const leases: HeldLease[] = new Array(count)
    const ttls: number[] = new Array(count)
    const deadlines: number[] = new Array(count)
    let latest = 0
    for (let i = 0; i < count; i++) {
      const lock = locks[i]!
      leases[i] = lock.#lease
      ttls[i] = lock.#ttlMs
      deadlines[i] = lock.#validUntil
      if (lock.#validUntil > latest) latest = lock.#validUntil
    }
    const start = now()
    const settleAll = (outcomes: readonly ExtendOutcome[] | undefined, error?: unknown) => {
      for (let i = 0; i < count; i++) {
        const lock = locks[i]!
        if (lock.#queue === settled) lock.#queue = undefined
        // A lock past its own validity by the reply is lost by #settle; the others are unaffected.
        const outcome = outcomes?.[i] ?? { error: error ?? new Error(`${backend.id} gave no outcome`) }
        lock.#renewed(lock.#settle(start, deadlines[i]!, ttls[i]!, outcome))
      }
    }
    // Bounded by the latest validity among them: past it, no answer matters to any of them.
    const settled: Promise<void> = withTimeout(latest - start, (signal) =>
      backend.extendMany!(leases, ttls, signal),
    ).then(
      (outcomes) => settleAll(outcomes),
      (error: unknown) => settleAll(undefined, error),
    )
    for (const lock of locks) lock.#queue = settled
  }

  async extend(ttl?: number | string): Promise<number> {
    const ttlMs = ttl === undefined ? this.#ttlMs : parseTtl(ttl)
    checkLimits(this.#ctx.backend, this.key, ttlMs)
    if (this.#state === 'released') {
      throw new LockReleasedError(`Cannot extend ${this.#subject}: it was already released`, this.#context())
    }
    const outcome = await this.#extendOnce(ttlMs)
    if (typeof outcome === 'object' && 'grantedMs' in outcome) {
      this.#renewer.arm()
      return outcome.grantedMs
    }
    if (outcome === 'released') {
      throw new LockReleasedError(`Cannot extend ${this.#subject}: it was released`, this.#context())
    }
    if (outcome === 'lost') throw this.signal.reason
    // The validity may have shrunk to what this extend asked: it may be over already (a short ttl whose
    // request took that long), else the expiry timer moves with it and a renewal comes soon.
    if (now() >= this.#validUntil) {
      this.#expireLocally()
      throw this.signal.reason
    }
    this.#renewer.unknown()
    const { error } = outcome
    if (error instanceof LockError) throw error
    throw new BackendUnavailableError(
      `Could not extend ${this.#subject} on ${this.#ctx.backend.id}: the outcome is unknown, the lease stays ` +
        'valid until lock.validUntil (the earlier end of the old lease and the one asked for); retry or stop the work',
      this.#context(error),
    )
  }

  /**
   * One owner-checked write beside the lease (an election's `proclaim`), run on the queue of extends so it
   * carries the current cookie and no renewal overlaps it; bounded by the validity. `false` from the store
   * means the grant is no longer ours: the lock is lost.
   * @throws {LockReleasedError} after `release()`
   * @throws {LockLostError} when the lease is no longer ours
   * @throws {BackendUnavailableError} when the outcome is unknown (the store keeps the old value or the new)
   */
  async update(
    what: string,
    write: (
      lease: HeldLease,
      signal: AbortSignal,
    ) => Promise<{ readonly done: boolean; readonly cookie?: unknown }>,
  ): Promise<void> {
    if (this.#state === 'released' || this.#releasing) {
      throw new LockReleasedError(`Cannot ${what} ${this.#subject}: it was released`, this.#context())
    }
    type Outcome = { done: boolean; cookie?: unknown } | { error: unknown } | 'lost' | 'released'
    const run = async (): Promise<Outcome> => {
      if (this.#state !== 'held') return this.#state
      try {
        const lease = this.#lease
        return await withTimeout(this.#validUntil - now(), (signal) => write(lease, signal))
      } catch (error) {
        return { error }
      } finally {
        if (this.#queue === result) this.#queue = undefined
      }
    }
    const result = (this.#queue ?? Promise.resolve()).then(run)
    this.#queue = result
    const outcome = await result
    if (outcome === 'released') {
      throw new LockReleasedError(`Cannot ${what} ${this.#subject}: it was released`, this.#context())
    }
    if (outcome === 'lost' || (typeof outcome === 'object' && 'done' in outcome && !outcome.done)) {
      this.#markLost(
        new LockLostError(
          `${this.#Subject} on ${this.#ctx.backend.id} was lost: the store no longer has it under our owner ` +
            '(it expired or was taken over)',
          this.#context(),
        ),
        'not_owner',
      )
      throw this.signal.reason
    }
    if ('error' in outcome) {
      const { error } = outcome
      if (error instanceof LockError) throw error
      throw new BackendUnavailableError(
        `Could not ${what} ${this.#subject} on ${this.#ctx.backend.id}: the outcome is unknown (the store keeps the ` +
          'old value or the new one); retry, or stop the work',
        this.#context(error),
      )
    }
    if (outcome.cookie !== undefined) this.#cookie = outcome.cookie
  }

  token(): string {
    // Only a lock's: an election's or a semaphore's lease is resumed through its own primitive, if ever.
    if (this.#ctx.primitive !== undefined) {
      throw new CapabilityError(
        `Cannot make a token of ${this.#subject}: only a lock's lease can be resumed in another process, ` +
          'not one of an election, a semaphore or a read-write lock (see docs/resume.md)',
        this.#context(),
      )
    }
    const facet = (this.#ctx.backend as LockBackend).resume
    if (!facet) {
      throw new CapabilityError(
        `Cannot make a token of ${this.#subject}: ${this.#ctx.backend.id} cannot hand a lease to another ` +
          'process. See docs/resume.md for the stores that can, and why the others cannot',
        this.#context(),
      )
    }
    if (this.#state === 'released' || this.#releasing) {
      throw new LockReleasedError(`Cannot make a token of ${this.#subject}: it was released`, this.#context())
    }
    if (this.#state === 'lost' || now() >= this.#validUntil) throw this.signal.reason
    const lease = this.#lease
    // Encoded first: a backend that refuses to hand this lease on leaves it unshared.
    const cookie = facet.encode(lease)
    this.#shared = true
    return encodeToken({ ...lease, backend: this.#ctx.backend.id, ttlMs: this.#ttlMs, cookie })
  }

  release(): Promise<void> {
    this.#releasing ??= this.#release()
    return this.#releasing
  }

  /**
   * The client is closing: tell a holder still at work (lock.signal), then release. A lease shared through
   * its token is left to it: another process may go on with it (it ends by its ttl otherwise).
   */
  closeWithClient(): Promise<void> {
    if (this.#shared && this.#state === 'held' && !this.#releasing) {
      const error = new LockLostError(
        `${this.#Subject} on ${this.#ctx.backend.id} is no longer renewed here: its lock client was closed, and ` +
          'the lease was left to the holders of its token (it ends by its ttl unless one renews it)',
        this.#context(),
      )
      this.#markLost(error, 'client_closed')
      return Promise.resolve()
    }
    if (this.#state === 'held' && !this.#releasing) {
      const error = new LockLostError(
        `${this.#Subject} on ${this.#ctx.backend.id} was released because its lock client was closed`,
        this.#context(),
      )
      publish(channels.lost, () => ({ ...this.#diag(), reason: 'client_closed', error }))
      this.#lost ??= new AbortController()
      this.#lost.abort(error)
    }
    return this.release()
  }

  /** Releases on the store, then tells the client the lock is settled (one async step, not two per release). */
  async #release(): Promise<void> {
    try {
      const at = now()
      // The validity passed and the expiry timer has not fired yet (a busy event loop runs timers late): the
      // lock was lost before this release, and its holder hears so now rather than never. (Measured: a
      // hand-over with 9 ms of validity left, released 2 ms after it ended, its timer not yet run.)
      if (this.#state === 'held' && at >= this.#validUntil) this.#markLost(this.#expired(), 'expired')
      const wasHeld = this.#state === 'held'
      if (wasHeld) this.#state = 'released'
      // From the moment the release is sent the store may free the lease (a waiter may be granted before the
      // reply, or without one ever coming): nothing of it is certainly ours any more.
      this.#validUntil = Math.min(this.#validUntil, at)
      this.#renewer.stop()
      this.#detachLost?.()
      // Wait for an extend already in flight, so the release is the last word on this lease.
      if (this.#queue) await this.#queue
      try {
        // Bounded: after one ttl the lease has ended by itself, and a hung store must not hang the caller.
        const lease = this.#lease
        const released = await withTimeout(this.#ttlMs, (signal) => this.#ctx.backend.release(lease, signal))
        publish(channels.release, () => ({ ...this.#diag(), released }))
      } catch (error) {
        publish(channels.release, () => ({ ...this.#diag(), released: false, error }))
        publish(channels.storeError, () => ({ ...this.#diag(), operation: 'release', error }))
        // A lost lease is not ours to clean up; a held one is, and the caller should know it will linger.
        if (wasHeld) {
          throw new BackendUnavailableError(
            `Could not release ${this.#subject} on ${this.#ctx.backend.id}; it will expire by itself within its ttl ` +
              `(${this.#ttlMs} ms)`,
            this.#context(error),
          )
        }
      }
    } finally {
      this.#ctx.onSettled(this)
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release()
  }
}
