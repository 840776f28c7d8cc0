/**
 * The acquire loop: one attempt, then wait for a change hint or a jittered sleep (bounded by the holder's
 * remaining lease and the deadline), and again; one last attempt at the deadline. A failed attempt backs
 * off on a real timer; a store unreachable for too long is reported; an acquire that gives up after any
 * attempt starts its owner-checked clean-up (`abandon`). One `AcquireLoop` per `acquire` call holds the
 * loop's state; one attempt itself is attempt.ts. (About 400 lines: the loop's state and every
 * step that changes it stay in one class, to be read together.)
 */
import {
  type AttemptBounds,
  type AttemptTracker,
  abandonAfter,
  boundedAttempt,
  releaseQuietly,
  unavailableError,
} from './attempt.js'
import type { AcquireRequest, AttemptResult, Grant, LeaseFacet } from './backend.js'
import { jitter, nap, now, sleep } from './clock.js'
import { channels, publish } from './diagnostics.js'
import { BackendUnavailableError, LockNotAcquiredError, type Primitive, quoteKey } from './errors.js'
import { type LockContext, LockHandle } from './lock.js'
import { type ResolvedAcquireOptions, validUntil } from './options.js'
import { newOwnerId } from './owner.js'
import type { Renewals } from './renewer.js'
import { WakeHint } from './wake-hint.js'

/** How long a failed acquire waits for its clean-up (`abandon`) before it rejects. */
const ABANDON_WAIT_MS = 1000
/** Poll caps of the acquire loop: a backend that notifies is polled only as a fallback for lost messages. */
const POLL_FIRST_MS = 10
const POLL_MAX_MS = 250
const POLL_MAX_NOTIFY_MS = 1000
/**
 * Unavailability for longer than this (or one ttl, whichever is longer) fails a waiting acquire with
 * `BackendUnavailableError`, whatever its timeout: a store that is down is reported, not waited on forever.
 */
const UNAVAILABLE_GIVE_UP_MS = 5000
/** Backoff after a failed attempt: a real timer, never a wake-up hint, so a failing store cannot make us spin. */
const FAILURE_BACKOFF_FIRST_MS = 50
const FAILURE_BACKOFF_MAX_MS = 1000
/**
 * The time an acquire gives the store at least, from its start: the bound of a `tryAcquire` (timeout 0),
 * and of an acquire with a shorter timeout. Long enough for a first request on a fresh connection (TCP,
 * TLS, a cloud token); a store that has not answered by then is reported unavailable. A backend whose
 * healthy attempts take longer says so (`limits.minAttemptMs`).
 */
const ATTEMPT_MIN_MS = 1000
/**
 * The least an attempt gets when it starts at (or just before) the deadline, as the one last attempt
 * does: a store that answers gives its answer; one that does not costs only this overrun. An attempt cut
 * short has an unknown outcome, so its acquire cleans up after it (`abandon`), as after any other.
 */
const LAST_ATTEMPT_MS = 300
/**
 * A failed acquire rejects at most this long after its deadline (after ATTEMPT_MIN_MS for a shorter
 * timeout), or after its give-up time: the last attempt's overrun, the backend's account of a timeout
 * (EXPLAIN_WAIT_MS) and the wait for the clean-up all fit in it. docs/api.md promises it.
 */
const SETTLE_SLACK_MS = 500

/**
 * What an acquire needs from its client; also the context of the locks it grants (made once per client
 * and primitive, not per acquire).
 */
export interface AcquireContext extends LockContext {
  readonly backend: LeaseFacet
  readonly driftFactor: number
  /** The client's held locks: a grant joins them, and leaves once released or lost (`onSettled`). */
  readonly held: Set<LockHandle>
  /** The client's timer for the renewals and expiries of every lock it holds. */
  readonly renewals: Renewals<LockHandle>
  /** The client's timer for the bounds of its attempts. */
  readonly bounds: AttemptBounds
  /**
   * Clean-ups of failed acquires still running on a store that was answering: `close` lets them finish
   * (bounded) before closing the store.
   */
  readonly cleanups: Set<Promise<unknown>>
  /** What is acquired, for messages: a lock (the default), or the leadership of an election. */
  readonly primitive?: Primitive | undefined
}

/**
 * What becomes of a grant the acquire takes, valid until `until`: by default a `LockHandle` of its key; an
 * atomic multi-key acquire (atomic-acquire.ts) makes one of each key's grant instead.
 */
export type Hold<L> = (grant: Grant, req: AcquireRequest, until: number) => L

/** Runs one acquire to its end: a held lock, or the error its caller hears (its clean-up under way). */
export function acquireLoop(
  ctx: AcquireContext,
  key: string,
  opts: ResolvedAcquireOptions,
  signal: AbortSignal,
): Promise<LockHandle>
export function acquireLoop<L extends object>(
  ctx: AcquireContext,
  key: string,
  opts: ResolvedAcquireOptions,
  signal: AbortSignal,
  hold: Hold<L>,
): Promise<L>
export function acquireLoop<L extends object>(
  ctx: AcquireContext,
  key: string,
  opts: ResolvedAcquireOptions,
  signal: AbortSignal,
  hold?: Hold<L>,
): Promise<L | LockHandle> {
  return new AcquireLoop<L | LockHandle>(ctx, key, opts, signal, hold).run()
}

/**
 * One `acquire` call: its state (named fields, not captured variables) and the steps that change it. No
 * closure is made per acquire: an uncontended one is a few microseconds of the core, and each counts.
 */
class AcquireLoop<L extends object> implements AttemptTracker {
  readonly #ctx: AcquireContext
  readonly #backend: LeaseFacet
  #req: AcquireRequest
  readonly #opts: ResolvedAcquireOptions
  readonly #signal: AbortSignal
  readonly #startedAt = now()
  readonly #deadline: number
  readonly #giveUpAfterMs: number
  /** ATTEMPT_MIN_MS, or the backend's longer `limits.minAttemptMs`. */
  readonly #attemptMinMs: number

  #attempts = 0
  /** Where the latest attempt's bound ends (`#startAttempt`). */
  #attemptEnd = 0
  /** The next poll's cap: doubles while the key stays held. */
  #poll = POLL_FIRST_MS
  /** The next backoff after a failure: doubles while the store keeps failing. */
  #backoff = FAILURE_BACKOFF_FIRST_MS
  /** Since when every attempt has failed (undefined while the store answers). */
  #unavailableSince: number | undefined
  /** The error of the latest attempt that found the store unavailable: what a give-up reports. */
  #outage: BackendUnavailableError | undefined
  /**
   * The start of the earliest attempt whose outcome is unknown (no answer, an abort racing the reply) and
   * not yet resolved by a refusal: it may have set the lease a later attempt finds "already ours", so a
   * grant's validity counts from there, never later. A refusal resolves it: had that attempt taken the
   * lock, the store would have answered the later attempt "ours" while its lease lived.
   */
  #unresolvedSince: number | undefined
  /** The latest attempt as the backend runs it, for the clean-up to follow (see `#abandon`). */
  #inFlight: Promise<unknown> | undefined
  /** Armed before the attempt that precedes each wait (see WakeHint), or right after it was sent (`#rearm`). */
  #hint: WakeHint | undefined
  /**
   * After a wake-up on a backend with `localHint`: arm the next hint as soon as the next attempt was sent,
   * in the same turn, so that arming it overlaps the attempt's round trip instead of delaying its send.
   */
  #rearm = false
  /** Hints in a row that settled the moment they were armed. */
  #instantHints = 0
  /**
   * A grant handed over by the backend while we waited (fair queues), and when our last refused attempt
   * started: the hand-over happened after the store saw that attempt, so validity counts from there.
   */
  #handed: Grant | undefined
  #attemptStart: number
  /** When the latest attempt started, or the latest hand-over was taken: a grant's `attemptMs` counts from there. */
  #roundStart: number
  /**
   * Until when a grant under way (`Busy.pending`) is waited for, past a shorter deadline: the time the
   * first such answer asked for plus one attempt's (`#attemptMinMs`). Fixed then: never moved again.
   */
  #pendingUntil: number | undefined
  /** The clean-up of a failed acquire; the rejection waits for it briefly (see `run`). */
  #abandoning: Promise<unknown> | undefined

  /** What a grant becomes; undefined: a `LockHandle` (`#handle`). */
  readonly #hold: Hold<L> | undefined

  constructor(
    ctx: AcquireContext,
    key: string,
    opts: ResolvedAcquireOptions,
    signal: AbortSignal,
    hold: Hold<L> | undefined,
  ) {
    this.#ctx = ctx
    this.#hold = hold
    this.#backend = ctx.backend
    this.#opts = opts
    this.#signal = signal
    this.#deadline = this.#startedAt + opts.timeoutMs
    // One clock read for the three: each acquire reads the clock often enough.
    this.#attemptStart = this.#startedAt
    this.#roundStart = this.#startedAt
    // One owner id for every attempt: a backend that finds the key held by it after a lost reply knows it is ours.
    const req: { -readonly [K in keyof AcquireRequest]: AcquireRequest[K] } = {
      key,
      owner: newOwnerId(),
      ttlMs: opts.ttlMs,
      since: this.#startedAt,
      holder: opts.holder,
    }
    if (opts.value !== undefined) req.value = opts.value
    if (opts.semaphore !== undefined) req.semaphore = opts.semaphore
    if (opts.rwlock !== undefined) req.rwlock = opts.rwlock
    if (opts.resumable) req.resumable = true
    this.#req = req
    this.#giveUpAfterMs = Math.max(opts.ttlMs, UNAVAILABLE_GIVE_UP_MS)
    this.#attemptMinMs = Math.max(ATTEMPT_MIN_MS, ctx.backend.limits?.minAttemptMs ?? 0)
  }

  /** Who acquires, for the diagnostics channels: made only for a subscriber. */
  get #diag(): { readonly key: string; readonly backend: string; readonly owner: string } {
    return { key: this.#req.key, backend: this.#backend.id, owner: this.#req.owner }
  }

  /**
   * Sets `#inFlight` to each attempt, right after the backend sent it; re-arms a local hint there (see
   * `#rearm`).
   */
  sent(attempt: Promise<unknown>): void {
    this.#inFlight = attempt
    if (this.#rearm) {
      this.#rearm = false
      this.#hint = WakeHint.arm(this.#backend, this.#req, this.#signal)
    }
  }

  async run(): Promise<L> {
    // Tested before `publish`: its message closure would be made on every acquire, listened to or not.
    if (channels.acquireStart.hasSubscribers) {
      const { ttlMs, timeoutMs } = this.#opts
      publish(channels.acquireStart, () => ({ ...this.#diag, ttlMs, timeoutMs }))
    }
    try {
      for (;;) {
        if (this.#signal.aborted) {
          // A hand-over that arrived with the abort is ours on the store: give it back.
          if (this.#handed) void releaseQuietly(this.#backend, this.#req, this.#handed)
          this.#fail(this.#signal.reason)
        }
        let result: AttemptResult | undefined
        if (this.#handed) result = this.#takeHanded(this.#handed)
        else {
          try {
            result = this.#attemptAnswered(await this.#attempt())
          } catch (error) {
            result = this.#failedAttempt(error)
          }
        }
        if (result?.granted) {
          // Awaited only when the grant has to be given back first: an await costs every acquire a turn.
          const taken = this.#take(result)
          const lock = taken instanceof Promise ? await taken : taken
          if (lock) return lock
        }
        if (now() >= this.#waitEnd(result)) this.#fail(this.#notAcquired(result))
        // A semaphore's store compared its limit with ours on that refusal: from now on this acquire
        // follows the stored limit, so a `setLimit` while it waits admits it rather than refusing it.
        const permits = this.#req.semaphore
        if (result?.granted === false && permits && !permits.limitCompared) {
          this.#req = { ...this.#req, semaphore: { ...permits, limitCompared: true } }
        }
        if (result === undefined) {
          await this.#backOff()
          // A process stalled through its backoff may wake past the give-up time: it starts no attempt
          // there (its bound would be below zero), and reports the outage it saw.
          const since = this.#unavailableSince
          if (this.#outage && since !== undefined && now() >= since + this.#giveUpAfterMs)
            this.#fail(this.#outage)
          continue
        }
        if (!this.#hint) {
          this.#hint = WakeHint.arm(this.#backend, this.#req, this.#signal)
          // Freshly armed: re-check at once, since the holder may have left before the hint was listening.
          if (this.#hint && this.#attempts === 1) continue
        }
        await this.#wait(result)
      }
    } catch (error) {
      // Leave nothing behind when the caller hears of the failure: a queue ticket (etcd, fair Redis) or
      // an uncertain grant still in place would block, for a moment, the next acquire the caller makes.
      // Bounded, so a hung store cannot hold up an abort; the clean-up itself goes on in the background.
      // An abort rejects at once, as the caller asked: its clean-up may wait for an attempt still in flight.
      // Not for a store that stopped answering (its clean-up cannot land any sooner), and only within the
      // acquire's settling time: a timeout is a promise.
      const wait = Math.min(ABANDON_WAIT_MS, this.#settleBy() - now())
      const answering = this.#unavailableSince === undefined
      if (this.#abandoning && !this.#signal.aborted && answering && wait > 0) {
        const stop = new AbortController()
        await Promise.race([this.#abandoning, sleep(wait, stop.signal)])
        stop.abort()
      }
      throw error
    }
  }

  /** The grant handed over while we waited, taken like an attempt's answer. */
  #takeHanded(handed: Grant): Grant {
    this.#handed = undefined
    this.#roundStart = now()
    return this.#answered(handed)
  }

  /** The next attempt, bounded (attempt.ts). */
  #attempt(): Promise<AttemptResult> {
    const boundMs = this.#startAttempt()
    return boundedAttempt(this.#backend, this.#req, this.#signal, this.#ctx.bounds, boundMs, this)
  }

  /** An attempt's answer: a refusal resolves the earlier unknown outcomes. */
  #attemptAnswered(result: AttemptResult): AttemptResult {
    if (!result.granted) this.#unresolvedSince = undefined
    return this.#answered(result)
  }

  /** The store answered: it is reachable again. */
  #answered<R extends AttemptResult>(result: R): R {
    this.#unavailableSince = undefined
    this.#outage = undefined
    this.#backoff = FAILURE_BACKOFF_FIRST_MS
    return result
  }

  /** Counts an attempt and returns its bound. */
  #startAttempt(): number {
    this.#attempts++
    this.#attemptStart = now()
    this.#roundStart = this.#attemptStart
    // Every attempt is bounded by the deadline (ATTEMPT_MIN_MS from the acquire's start at least, and
    // LAST_ATTEMPT_MS for one that starts at it) and by the give-up time, so an unreachable store is
    // reported on time, never waited on past them.
    const giveUpAt = (this.#unavailableSince ?? this.#attemptStart) + this.#giveUpAfterMs
    const end = Math.min(
      Math.max(
        this.#deadline,
        this.#pendingUntil ?? 0,
        this.#startedAt + this.#attemptMinMs,
        this.#attemptStart + LAST_ATTEMPT_MS,
      ),
      giveUpAt,
    )
    this.#attemptEnd = end
    return end - this.#attemptStart
  }

  /**
   * When a failed acquire has rejected at the latest: SETTLE_SLACK_MS after its deadline (at least
   * ATTEMPT_MIN_MS after its start), or after its give-up time if the store has been unreachable.
   */
  #settleBy(): number {
    const deadline = Math.max(this.#deadline, this.#pendingUntil ?? 0, this.#startedAt + this.#attemptMinMs)
    const giveUpAt = (this.#unavailableSince ?? Number.POSITIVE_INFINITY) + this.#giveUpAfterMs
    return Math.min(deadline, giveUpAt) + SETTLE_SLACK_MS
  }

  /** An attempt that failed: ends the acquire, unless the store is merely unreachable and time remains. */
  #failedAttempt(error: unknown): undefined {
    if (this.#signal.aborted) this.#fail(this.#signal.reason)
    this.#unresolvedSince ??= this.#attemptStart
    // The last attempt ran out of time at the deadline while the store was answering (it refused the
    // attempt before): the lock is, as far as anyone knows, still held elsewhere. Contention, not an outage.
    const answering = this.#attempts > 1 && this.#unavailableSince === undefined
    if (answering && now() >= this.#attemptEnd && now() >= this.#deadline) this.#fail(this.#notAcquired())
    publish(channels.storeError, () => ({ ...this.#diag, operation: 'acquire', error }))
    const wrapped = unavailableError(
      this.#backend,
      this.#req.key,
      error,
      this.#ctx.primitive === 'election' ? 'campaign for' : 'acquire',
      this.#ctx.primitive,
    )
    // The store's own refusal of the request (a key holding foreign data): it answers, and may clean up.
    if (!(wrapped instanceof BackendUnavailableError)) this.#fail(wrapped)
    this.#unavailableSince ??= this.#attemptStart
    this.#outage = wrapped
    if (!wrapped.retryable) this.#fail(wrapped)
    if (now() >= this.#deadline || now() >= this.#unavailableSince + this.#giveUpAfterMs) this.#fail(wrapped)
    return undefined
  }

  /**
   * The lock for `grant`; or, when the grant must be given back first, the promise of its release: it
   * rejects once the acquire was aborted, and resolves undefined for a grant that came too late to be valid.
   */
  #take(grant: Grant): L | Promise<undefined> {
    if (this.#signal.aborted) return this.#giveBack(grant, true)
    const from = Math.min(this.#attemptStart, this.#unresolvedSince ?? this.#attemptStart)
    const until = validUntil(from, grant.ttlMs, this.#ctx.driftFactor)
    if (now() >= until || grant.lost?.aborted) return this.#giveBack(grant, false)
    const lock = this.#hold
      ? this.#hold(grant, this.#req, until)
      : (this.#handle(grant, until) as unknown as L)
    this.#hint?.disarm()
    if (channels.acquireOk.hasSubscribers) {
      publish(channels.acquireOk, () => {
        const at = now()
        return {
          ...this.#diag,
          fence: grant.fence,
          attempts: this.#attempts,
          waitedMs: at - this.#startedAt,
          attemptMs: at - this.#roundStart,
        }
      })
    }
    return lock
  }

  /** Releases a grant the acquire cannot take; then fails the acquire if it was aborted. */
  async #giveBack(grant: Grant, aborted: boolean): Promise<undefined> {
    // Awaited: the next attempt reuses this owner id and must not find this stale grant still in place.
    await releaseQuietly(this.#backend, this.#req, grant)
    if (aborted) this.#fail(this.#signal.reason)
    // The grant arrived already invalid (a slow reply): it was released; try again like any refusal.
    this.#unresolvedSince = undefined
    return undefined
  }

  #handle(grant: Grant, until: number): LockHandle {
    const { key, owner } = this.#req
    const lock = new LockHandle(
      this.#ctx,
      { key, owner, fence: grant.fence, cookie: grant.cookie },
      // Validity from the lease granted; renewals ask for the ttl requested (a hand-over may start shorter).
      {
        ttlMs: Math.max(grant.ttlMs, this.#opts.ttlMs),
        validUntil: until,
        ...(grant.lost ? { lost: grant.lost } : {}),
      },
      this.#opts.renew,
    )
    this.#ctx.held.add(lock)
    return lock
  }

  #notAcquired(last?: AttemptResult): LockNotAcquiredError {
    const { key } = this.#req
    const waited = `gave up after ${Math.round(now() - this.#startedAt)} ms (timeout ${this.#opts.timeoutMs} ms)`
    return new LockNotAcquiredError(
      last?.granted === false && last.pending
        ? `Lock ${quoteKey(key)} on ${this.#backend.id} was free, but the store did not settle its grant in ` +
            `time; ${waited}. Use a longer timeout, or check the store's clock and latency with doctor`
        : this.#ctx.primitive === 'election'
          ? `Election ${quoteKey(key)} on ${this.#backend.id} is led by another candidate; ${waited}. Use a longer ` +
            'timeout, or observe the election to see its leader'
          : this.#req.semaphore
            ? `Semaphore ${quoteKey(key)} on ${this.#backend.id} had no ${this.#req.semaphore.permits} of its ` +
              `${this.#req.semaphore.limit} permits free for this acquire; ${waited}. Use a longer timeout, or ` +
              'inspect the semaphore to see its holders'
            : this.#req.rwlock
              ? `Read-write lock ${quoteKey(key)} on ${this.#backend.id} had ${this.#req.rwlock.mode === 'read' ? 'a writer' : 'other holders'} ` +
                `ahead of this ${this.#req.rwlock.mode}; ${waited}. Use a longer timeout, or inspect the lock to see its holders`
              : `Lock ${quoteKey(key)} on ${this.#backend.id} is held by another owner; ${waited}. Use a longer timeout, ` +
                'or inspect the lock to see its holder',
      { key, backend: this.#backend.id },
    )
  }

  /**
   * After a failure: a real timer with backoff, never the hint (a failing store fails its hint too, at
   * once, and racing it would spin without ever yielding to timers or I/O).
   */
  async #backOff(): Promise<void> {
    const giveUpAt = (this.#unavailableSince ?? now()) + this.#giveUpAfterMs
    const wait = Math.max(1, Math.min(jitter(this.#backoff), this.#deadline - now(), giveUpAt - now()))
    this.#backoff = Math.min(this.#backoff * 2, FAILURE_BACKOFF_MAX_MS)
    await nap(wait, this.#signal).promise
  }

  /**
   * While the key is held elsewhere: a jittered poll, no longer than the holder's remaining lease or the
   * deadline, raced against the hint. A grant handed over meanwhile is taken on the next round.
   */
  async #wait(result: AttemptResult): Promise<void> {
    const hint = this.#hint
    const cap = this.#backend.capabilities.notify && hint ? POLL_MAX_NOTIFY_MS : POLL_MAX_MS
    // A waiter the store keeps in line, and wakes when its turn comes, polls at the cap from the start:
    // the early polls would only ask again for a turn that the notification brings anyway.
    if (!result.granted && result.queued && hint) this.#poll = cap
    let wait = jitter(this.#poll)
    this.#poll = Math.min(this.#poll * 2, cap)
    if (!result.granted && result.retryInMs !== undefined) wait = Math.min(wait, result.retryInMs + 1)
    wait = Math.max(0, Math.min(wait, this.#waitEnd(result) - now()))
    const slept = nap(wait, this.#signal)
    // A hint that keeps settling the moment it is armed may be a watch that cannot be set up (no news), or
    // real news: holders that release within a millisecond of a waiter's arming. After two in a row it
    // counts only after a pause, doubling from 1 ms with each further one: a hint that is never news costs
    // a few attempts, not a spin, and one that is news still wakes the waiter long before the poll would.
    const pause =
      hint && this.#instantHints >= 2
        ? nap(Math.min(2 ** (this.#instantHints - 2), POLL_MAX_NOTIFY_MS), this.#signal)
        : undefined
    const heard = pause && hint ? Promise.all([hint.promise, pause.promise]).then(([g]) => g) : hint?.promise
    this.#handed = await (heard ? Promise.race([slept.promise, heard]) : slept.promise)
    slept.end()
    pause?.end()
    if (hint) {
      this.#instantHints = hint.instant ? this.#instantHints + 1 : 0
      // The poll's timer came first: the hint stays armed for the next wait. Armed again at every poll,
      // the backend would set up its watch or subscription again each time for nothing (etcd: a watch and
      // a read; measured, most of a contended etcd waiter's requests), while the one in place hears of a
      // change just as well: it was armed before the attempts that follow it.
      if (!hint.settled) return
      hint.disarm()
      // A grant handed over is taken on the next round: arming a new hint first would put a store request
      // (a queue listing, a subscription) on every hand-over's critical path, for a hint nobody needs. The
      // loop arms one again if that grant cannot be taken after all. A local hint is armed just after
      // the next attempt is sent (`#track`), off the path from the wake-up to that attempt.
      this.#hint = undefined
      if (!this.#handed) {
        if (this.#backend.capabilities.localHint) this.#rearm = true
        else this.#hint = WakeHint.arm(this.#backend, this.#req, this.#signal)
      }
    }
  }

  /** Until when the acquire waits after `result`: its deadline, or for a grant under way, `#pendingUntil`. */
  #waitEnd(result: AttemptResult | undefined): number {
    if (result?.granted !== false || !result.pending) return this.#deadline
    this.#pendingUntil ??= now() + (result.retryInMs ?? 0) + this.#attemptMinMs
    return Math.max(this.#deadline, this.#pendingUntil)
  }

  /** Ends the acquire with `error`; after any attempt, its clean-up starts first. */
  #fail(error: unknown): never {
    this.#hint?.disarm()
    if (this.#attempts > 0) this.#abandon()
    publish(channels.acquireFail, () => ({
      ...this.#diag,
      attempts: this.#attempts,
      waitedMs: now() - this.#startedAt,
      aborted: this.#signal.aborted,
      error,
    }))
    throw error
  }

  /**
   * Outcome unknown -> owner-checked clean-up, for every backend, whatever the last attempt said: an
   * attempt aborted or timed out may still be granted on the store. The clean-up follows the attempt
   * (bounded), so it is the last word on what that attempt did. A backend bug (even a synchronous throw)
   * never replaces the acquire's error. `close` waits for it only while the store was answering: the
   * clean-up of a store that stopped answering cannot land any sooner, and what it leaves ends by its ttl.
   */
  #abandon(): void {
    const cleanup = abandonAfter(this.#backend, this.#req, this.#inFlight)
    this.#abandoning = cleanup
    if (this.#unavailableSince !== undefined) return
    const { cleanups } = this.#ctx
    cleanups.add(cleanup)
    void cleanup.finally(() => cleanups.delete(cleanup))
  }
}
