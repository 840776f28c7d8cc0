import { setMaxListeners } from 'node:events'
import { attach, type LinkedAbort, linkedAbort } from './abort.js'
import type { AcquireRequest, AttemptResult, Grant, LockBackend, LockInfo } from './backend.js'
import { giveBack, jitter, now, sleep, takeController, timerDelay, withTimeout } from './clock.js'
import { channels, publish } from './diagnostics.js'
import {
  BackendUnavailableError,
  ClientClosedError,
  causeText,
  LockError,
  LockNotAcquiredError,
  quoteKey,
} from './errors.js'
import { type Lock, LockHandle } from './lock.js'
import {
  type AcquireOptions,
  type ClientOptions,
  checkLimits,
  type ResolvedAcquireOptions,
  type ResolvedClientOptions,
  resolveAcquireOptions,
  resolveClientOptions,
  validateKey,
  validUntil,
} from './options.js'
import { newOwnerId } from './owner.js'

/** A lock client over one backend. Create it with `createLockClient` (src/client.ts). */
export interface LockClient extends AsyncDisposable {
  /**
   * Takes `key`, waiting while someone else holds it.
   * @throws {LockNotAcquiredError} when `timeout` passes while the lock is held elsewhere
   * @throws {BackendUnavailableError} when the store cannot be reached
   * @throws `signal.reason` when `signal` aborts
   */
  acquire(key: string, options?: AcquireOptions): Promise<Lock>
  /** Like `acquire` with `timeout` 0 by default; resolves `null` instead of throwing when held elsewhere. */
  tryAcquire(key: string, options?: AcquireOptions): Promise<Lock | null>
  /** Runs `fn` while holding `key` and always releases afterwards; resolves with what `fn` returns. */
  withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>, options?: AcquireOptions): Promise<T>
  /** Who holds `key`, as far as the store says now. Diagnostic only: never decide who may act on it. */
  inspect(key: string, options?: { readonly signal?: AbortSignal | undefined }): Promise<LockInfo>
  /**
   * Stops renewers, releases held locks (best effort; their holders see lock.signal abort), rejects pending
   * acquires, and closes the backend, which closes only what it opened itself (never your driver client).
   */
  close(): Promise<void>
  /** The backend's id, e.g. `file:///var/lock/fencelock`. Undefined until a URL-configured backend has loaded. */
  readonly backendId: string | undefined
}

/**
 * The reason for ending a wait's own timer and hint: a shared value, since `abort()` without one builds a
 * DOMException with a stack trace on every wait (measurable when many waiters wake per release).
 */
const WAIT_OVER = Object.freeze({ name: 'WaitOver', message: 'the wait is over' })
/** How long a failed acquire waits for its clean-up (`abandon`) before it rejects. */
const ABANDON_WAIT_MS = 1000
/** How long a timed-out attempt waits for the backend's own account of the failure. */
const EXPLAIN_WAIT_MS = 100
/** How long the clean-up of a failed acquire waits for its last attempt to settle before it goes ahead. */
const SETTLE_WAIT_MS = 2000
/** How long `close` waits for the clean-ups of acquires it interrupted. */
const CLOSE_CLEANUP_WAIT_MS = 3000
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
/** The least time one attempt gets, even at its deadline (a `tryAcquire` makes one whole attempt). */
const ATTEMPT_MIN_MS = 2000
/** A hint that settles faster than this after being armed, twice in a row, is ignored for one wait. */
const INSTANT_HINT_MS = 1

/**
 * A lock client over `backend`, or over the backend `load` makes (called once the options are known to be
 * good, so a bad option never leaves a loading module's failure unreported). The public
 * `createLockClient` (src/client.ts) turns a URL into such a `load`; the core names no backend.
 * @throws {TypeError} for a bad option or something that is not a backend
 */
export function clientOver(
  backend: LockBackend | (() => Promise<LockBackend>),
  options?: ClientOptions,
): LockClient {
  const resolved = resolveClientOptions(options)
  if (typeof backend === 'function') {
    const loading = backend()
    // Surfaced by the first operation; this only keeps an unused failure from being "unhandled".
    loading.catch(() => {})
    return new Client(loading, resolved)
  }
  if (typeof backend !== 'object' || backend === null || typeof backend.tryAcquire !== 'function') {
    throw new TypeError('Expected a backend URL string or a LockBackend object as the first argument')
  }
  return new Client(Promise.resolve(backend), resolved, backend.id)
}

class Client implements LockClient {
  readonly #backend: Promise<LockBackend>
  readonly #options: ResolvedClientOptions
  readonly #closing = new AbortController()
  readonly #held = new Set<LockHandle>()
  /** Acquires under way. */
  readonly #running = new Set<Promise<unknown>>()
  /** Clean-ups of failed acquires still running: `close` lets them finish (bounded) before closing the store. */
  readonly #cleanups = new Set<Promise<unknown>>()
  #backendId: string | undefined
  #closed: Promise<void> | undefined

  constructor(backend: Promise<LockBackend>, options: ResolvedClientOptions, backendId?: string) {
    this.#backendId = backendId
    // Every pending acquire listens to this signal; dozens at once are normal, not a leak.
    setMaxListeners(0, this.#closing.signal)
    this.#backend = backend.then((b) => {
      this.#backendId = b.id
      return b
    })
    this.#backend.catch(() => {})
    this.#options = options
  }

  get backendId(): string | undefined {
    return this.#backendId
  }

  async acquire(key: string, options?: AcquireOptions): Promise<Lock> {
    validateKey(key)
    const opts = resolveAcquireOptions(options, this.#options, this.#options.timeoutMs)
    return this.#acquire(key, opts)
  }

  async tryAcquire(key: string, options?: AcquireOptions): Promise<Lock | null> {
    validateKey(key)
    const opts = resolveAcquireOptions(options, this.#options, 0)
    try {
      return await this.#acquire(key, opts)
    } catch (error) {
      if (error instanceof LockNotAcquiredError) return null
      throw error
    }
  }

  async withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const lock = await this.acquire(key, options)
    let result: T
    try {
      result = await fn(lock)
    } catch (error) {
      // The work's own error matters more than a failed release; the release failure is still published.
      await lock.release().catch(() => {})
      throw error
    }
    if (lock.signal.aborted) {
      // fn finished, but not entirely under the lock: say so rather than report a clean run.
      await lock.release().catch(() => {})
      throw lock.signal.reason
    }
    await lock.release()
    return result
  }

  async inspect(key: string, options?: { readonly signal?: AbortSignal | undefined }): Promise<LockInfo> {
    validateKey(key)
    const backend = await this.#open(key)
    const link = linkedAbort(options?.signal, this.#closing.signal)
    try {
      return (await backend.inspect(key, link.signal)) ?? { held: false }
    } catch (error) {
      throw this.#unavailable(backend, key, error, 'inspect')
    } finally {
      link.dispose()
    }
  }

  async close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#closing.abort(new ClientClosedError('The lock client was closed while this call was pending'))
      // Holders still at work are told through lock.signal; releases already under way are awaited.
      await Promise.allSettled([...this.#held].map((lock) => lock.closeWithClient()))
      // The acquires this close rejects start their clean-up as they end (an abort ends them at once).
      await Promise.all([...this.#running])
      // Acquires the close just rejected may hold what an attempt in flight took: their clean-up needs
      // the backend open. Bounded: a hung store must not hang close(); their leases end by their ttl.
      if (this.#cleanups.size > 0) {
        const stop = new AbortController()
        await Promise.race([
          Promise.allSettled([...this.#cleanups]),
          sleep(CLOSE_CLEANUP_WAIT_MS, stop.signal),
        ])
        stop.abort()
      }
      // The backend closes only what it opened itself (its own connections, a subscriber), never a
      // driver client the user handed it.
      const backend = await this.#backend.catch(() => undefined)
      await backend?.close()
    })()
    return this.#closed
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close()
  }

  async #open(key: string, ttlMs?: number): Promise<LockBackend> {
    if (this.#closing.signal.aborted) {
      throw new ClientClosedError(`Cannot use lock ${quoteKey(key)}: the lock client is closed`, { key })
    }
    const backend = await this.#backend
    // Before any I/O: a key or a ttl the store cannot represent is the caller's mistake, not an outage.
    checkLimits(backend, key, ttlMs)
    return backend
  }

  #unavailable(backend: LockBackend, key: string, error: unknown, what: string): LockError {
    if (error instanceof LockError) return error
    if (error instanceof AttemptTimeout) {
      return new BackendUnavailableError(
        `Could not ${what} lock ${quoteKey(key)}: ${backend.id} did not answer within ${error.ms} ms`,
        { key, backend: backend.id, cause: error },
      )
    }
    return new BackendUnavailableError(
      `Could not ${what} lock ${quoteKey(key)}: ${backend.id} failed (${causeText(error)})`,
      { key, backend: backend.id, cause: error },
    )
  }

  /**
   * The acquire loop: one attempt, then wait for a change hint or a jittered sleep (bounded by the holder's
   * remaining lease and the deadline), and again; one last attempt at the deadline.
   */
  async #acquire(key: string, opts: ResolvedAcquireOptions): Promise<Lock> {
    const backend = await this.#open(key, opts.ttlMs)
    // Without a caller's signal the client-wide one serves as is: no controller on the uncontended path.
    const link = opts.signal ? linkedAbort(opts.signal, this.#closing.signal) : undefined
    const run = this.#acquireLoop(backend, key, opts, link?.signal ?? this.#closing.signal)
    // Tracked until it ends, so that close() knows when the acquires it rejects have started their clean-up.
    const ended: Promise<unknown> = run.then(
      () => this.#running.delete(ended),
      () => this.#running.delete(ended),
    )
    this.#running.add(ended)
    try {
      return await run
    } catch (error) {
      // Rejected by close(): settle once close() has done its work, so that `await client.close()` and then
      // handling this rejection (a common order) never leaves it unhandled for a turn of the event loop.
      if (this.#closed && error === this.#closing.signal.reason) await this.#closed.catch(() => {})
      throw error
    } finally {
      link?.dispose()
    }
  }

  async #acquireLoop(backend: LockBackend, key: string, opts: ResolvedAcquireOptions, signal: AbortSignal) {
    const startedAt = now()
    const deadline = startedAt + opts.timeoutMs
    // One owner id for every attempt: a backend that finds the key held by it after a lost reply knows it is ours.
    const owner = newOwnerId()
    const req: AcquireRequest = { key, owner, ttlMs: opts.ttlMs, holder: opts.holder }
    const diag = { key, backend: backend.id }
    publish(channels.acquireStart, () => ({ ...diag, ttlMs: opts.ttlMs, timeoutMs: opts.timeoutMs }))
    const giveUpAfterMs = Math.max(opts.ttlMs, UNAVAILABLE_GIVE_UP_MS)

    let attempts = 0
    let poll = POLL_FIRST_MS
    let backoff = FAILURE_BACKOFF_FIRST_MS
    let unavailableSince: number | undefined
    /**
     * The start of the earliest attempt whose outcome is unknown (no answer, an abort racing the reply) and
     * not yet resolved by a refusal: it may have set the lease a later attempt finds "already ours", so a
     * grant's validity counts from there, never later. A refusal resolves it: had that attempt taken the
     * lock, the store would have answered the later attempt "ours" while its lease lived.
     */
    let unresolvedSince: number | undefined
    /** The latest attempt as the backend runs it, for the clean-up to follow (see `fail`). */
    let inFlight: Promise<unknown> | undefined
    // The wake-up hint for the next wait. It is armed *before* the attempt that precedes the wait, so a
    // release landing between a failed attempt and the wait is never missed.
    let hint:
      | { promise: Promise<Grant | undefined>; cancel: LinkedAbort; armedAt: number; settledAt?: number }
      | undefined
    let instantHints = 0
    const arm = () => {
      if (!backend.waitForChange) return undefined
      const cancel = linkedAbort(signal)
      const armedAt = now()
      let promise: Promise<Grant | undefined>
      try {
        promise = backend.waitForChange(req, cancel.signal).then(
          (g) => (g && g.granted === true ? g : undefined),
          () => undefined,
        )
      } catch {
        promise = Promise.resolve(undefined)
      }
      const armed: NonNullable<typeof hint> = { promise, cancel, armedAt }
      promise.then(() => {
        armed.settledAt = now()
      })
      return armed
    }
    // A grant handed over by the backend while we waited (fair queues), and when our last refused attempt
    // started: the hand-over happened after the store saw that attempt, so validity counts from there.
    let handed: Grant | undefined
    let attemptStart = now()
    const disarm = () => {
      hint?.cancel.abort(WAIT_OVER)
      hint?.cancel.dispose()
    }
    /** The clean-up of a failed acquire; the rejection waits for it briefly (see the end of the loop). */
    let abandoning: Promise<unknown> | undefined
    const fail = (error: unknown): never => {
      disarm()
      if (attempts > 0) {
        // Outcome unknown -> owner-checked clean-up, for every backend, whatever the last attempt said:
        // an attempt aborted or timed out may still be granted on the store. The clean-up follows the
        // attempt (bounded), so it is the last word on what that attempt did. A backend bug (even a
        // synchronous throw) never replaces the acquire's error.
        const last = inFlight
        abandoning = (async () => {
          // A hung attempt is not waited for beyond this: the clean-up then goes first, best effort.
          if (last) {
            // A plain timer, cleared as soon as the attempt settles (a listener on a pooled signal would
            // outlive this wait).
            let timer: NodeJS.Timeout | undefined
            const late = new Promise<void>((resolve) => {
              timer = setTimeout(resolve, SETTLE_WAIT_MS)
            })
            await Promise.race([last.catch(() => {}), late])
            clearTimeout(timer)
          }
          await withTimeout(opts.ttlMs, (s) => backend.abandon(req, s))
        })().catch(() => {})
        const cleanup = abandoning
        this.#cleanups.add(cleanup)
        void cleanup.finally(() => this.#cleanups.delete(cleanup))
      }
      publish(channels.acquireFail, () => ({ ...diag, attempts, waitedMs: now() - startedAt, error }))
      throw error
    }

    try {
      for (;;) {
        if (signal.aborted) {
          // A hand-over that arrived with the abort is ours on the store: give it back.
          if (handed) void this.#releaseQuietly(backend, req, handed)
          fail(signal.reason)
        }
        let result: AttemptResult
        let failed = false
        try {
          if (handed) {
            result = handed
            handed = undefined
          } else {
            attempts++
            attemptStart = now()
            // Every attempt is bounded by the deadline (but gets ATTEMPT_MIN_MS at least) and by the
            // give-up time, so an unreachable store is reported on time, never waited on past them.
            const giveUpAt = (unavailableSince ?? attemptStart) + giveUpAfterMs
            const bound = Math.min(Math.max(deadline, attemptStart + ATTEMPT_MIN_MS), giveUpAt) - attemptStart
            result = await this.#attempt(backend, req, signal, bound, (p) => {
              inFlight = p
            })
            if (!result.granted) unresolvedSince = undefined
          }
          unavailableSince = undefined
          backoff = FAILURE_BACKOFF_FIRST_MS
        } catch (error) {
          if (signal.aborted) fail(signal.reason)
          unresolvedSince ??= attemptStart
          const wrapped = this.#unavailable(backend, key, error, 'acquire')
          if (!(wrapped instanceof BackendUnavailableError) || !wrapped.retryable) fail(wrapped)
          unavailableSince ??= attemptStart
          if (now() >= deadline || now() >= unavailableSince + giveUpAfterMs) fail(wrapped)
          result = { granted: false }
          failed = true
        }

        if (result.granted) {
          if (signal.aborted) {
            await this.#releaseQuietly(backend, req, result)
            fail(signal.reason)
          }
          const from = Math.min(attemptStart, unresolvedSince ?? attemptStart)
          const lock = await this.#grant(backend, req, result, from, opts)
          if (lock) {
            disarm()
            publish(channels.acquireOk, () => ({
              ...diag,
              owner,
              fence: lock.fence,
              attempts,
              waitedMs: now() - startedAt,
            }))
            return lock
          }
          // The grant arrived already invalid (a slow reply): it was released; try again like any refusal.
          unresolvedSince = undefined
        }

        if (now() >= deadline) {
          fail(
            new LockNotAcquiredError(
              `Lock ${quoteKey(key)} on ${backend.id} is held by another owner; gave up after ${Math.round(now() - startedAt)} ms ` +
                `(timeout ${opts.timeoutMs} ms). Use a longer timeout, or inspect the lock to see its holder`,
              { key, backend: backend.id },
            ),
          )
        }

        if (failed) {
          // After a failure: a real timer with backoff, never the hint (a failing store fails its hint
          // too, at once, and racing it would spin without ever yielding to timers or I/O).
          const giveUpAt = (unavailableSince ?? now()) + giveUpAfterMs
          const wait = Math.max(1, Math.min(jitter(backoff), deadline - now(), giveUpAt - now()))
          backoff = Math.min(backoff * 2, FAILURE_BACKOFF_MAX_MS)
          const timer = linkedAbort(signal)
          await sleep(wait, timer.signal)
          timer.dispose()
          continue
        }

        if (!hint) {
          hint = arm()
          // Freshly armed: re-check at once, since the holder may have left before the hint was listening.
          if (hint && attempts === 1) continue
        }
        const cap = backend.capabilities.notify && hint ? POLL_MAX_NOTIFY_MS : POLL_MAX_MS
        let wait = jitter(poll)
        poll = Math.min(poll * 2, cap)
        if (!result.granted && result.retryInMs !== undefined) wait = Math.min(wait, result.retryInMs + 1)
        wait = Math.max(0, Math.min(wait, deadline - now()))
        const timer = linkedAbort(signal)
        const slept = sleep(wait, timer.signal).then(() => undefined)
        // A hint that keeps settling the moment it is armed (a watch that cannot be set up) is no news:
        // after two in a row this wait is the timer's alone, so the loop always yields to timers and I/O.
        const useHint = hint && instantHints < 2
        handed = await (useHint && hint ? Promise.race([slept, hint.promise]) : slept)
        timer.abort(WAIT_OVER)
        timer.dispose()
        if (hint) {
          const { settledAt, armedAt } = hint
          const instant = settledAt !== undefined && settledAt - armedAt < INSTANT_HINT_MS
          instantHints = instant ? instantHints + 1 : 0
          disarm()
          hint = arm()
        }
      }
    } catch (error) {
      // Leave nothing behind when the caller hears of the failure: a queue ticket (etcd, fair Redis) or
      // an uncertain grant still in place would block, for a moment, the next acquire the caller makes.
      // Bounded, so a hung store cannot hold up an abort; the clean-up itself goes on in the background.
      // An abort rejects at once, as the caller asked: its clean-up may wait for an attempt still in flight.
      if (abandoning && !signal.aborted) {
        const stop = new AbortController()
        await Promise.race([abandoning, sleep(ABANDON_WAIT_MS, stop.signal)])
        stop.abort()
      }
      throw error
    }
  }

  /**
   * One attempt, raced against the signal and bounded by `boundMs`. A grant that lands after an abort or
   * the bound is released, never leaked; `track` receives the backend's own promise, which the clean-up of
   * a failed acquire waits for.
   */
  #attempt(
    backend: LockBackend,
    req: AcquireRequest,
    signal: AbortSignal,
    boundMs: number,
    track: (attempt: Promise<AttemptResult>) => void,
  ): Promise<AttemptResult> {
    // A pooled controller (a new one costs several microseconds, a large share of an in-memory cycle):
    // backends detach their listeners when a call settles, so one that did not abort is safe to reuse.
    const link = takeController()
    const detach = attach(signal, link)
    const timer = setTimeout(() => link.abort(new AttemptTimeout(Math.round(boundMs))), timerDelay(boundMs))
    let attempt: Promise<AttemptResult>
    try {
      attempt = backend.tryAcquire(req, link.signal)
    } catch (error) {
      attempt = Promise.reject(error)
    }
    track(attempt)
    const done = () => {
      clearTimeout(timer)
      detach()
      giveBack(link)
    }
    if (link.signal.aborted) {
      done()
      this.#releaseLate(backend, req, attempt)
      return Promise.reject(link.signal.reason)
    }
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        done()
        this.#releaseLate(backend, req, attempt)
        const reason = link.signal.reason
        if (!(reason instanceof AttemptTimeout)) return reject(reason)
        // Our own bound: the backend, which races the same signal, usually says at once what it was
        // waiting for (a connection refused, a TLS handshake failing): that beats "no answer".
        const stop = new AbortController()
        void Promise.race([
          attempt.then(
            () => reason,
            (error: unknown) => error,
          ),
          sleep(EXPLAIN_WAIT_MS, stop.signal),
        ]).then((error) => {
          stop.abort()
          reject(error instanceof BackendUnavailableError ? error : reason)
        })
      }
      link.signal.addEventListener('abort', onAbort, { once: true })
      attempt.then(
        (result) => {
          link.signal.removeEventListener('abort', onAbort)
          done()
          resolve(result)
        },
        (error) => {
          link.signal.removeEventListener('abort', onAbort)
          done()
          reject(error)
        },
      )
    })
  }

  #releaseLate(backend: LockBackend, req: AcquireRequest, attempt: Promise<AttemptResult>): void {
    attempt.then(
      (result) => (result.granted ? this.#releaseQuietly(backend, req, result) : undefined),
      () => {},
    )
  }

  /** Best effort: the lease ends by its ttl anyway if this fails. */
  async #releaseQuietly(backend: LockBackend, req: AcquireRequest, grant: Grant): Promise<void> {
    const lease = { key: req.key, owner: req.owner, fence: grant.fence, cookie: grant.cookie }
    await withTimeout(grant.ttlMs, (s) => backend.release(lease, s)).catch(() => {})
  }

  async #grant(
    backend: LockBackend,
    req: AcquireRequest,
    grant: Grant,
    attemptStart: number,
    opts: ResolvedAcquireOptions,
  ): Promise<LockHandle | undefined> {
    const lease = { key: req.key, owner: req.owner, fence: grant.fence, cookie: grant.cookie }
    const until = validUntil(attemptStart, grant.ttlMs, this.#options.driftFactor)
    if (now() >= until || grant.lost?.aborted) {
      // Awaited: the next attempt reuses this owner id and must not find this stale grant still in place.
      await this.#releaseQuietly(backend, req, grant)
      return undefined
    }
    const lock = new LockHandle(
      {
        backend,
        driftFactor: this.#options.driftFactor,
        onSettled: (l) => this.#held.delete(l),
      },
      lease,
      // Validity from the lease granted; renewals ask for the ttl requested (a hand-over may start shorter).
      {
        ttlMs: Math.max(grant.ttlMs, opts.ttlMs),
        validUntil: until,
        ...(grant.lost ? { lost: grant.lost } : {}),
      },
      opts.renew,
    )
    this.#held.add(lock)
    return lock
  }
}

/** An attempt that outlived its bound (the deadline, or the give-up time of an unreachable store). */
class AttemptTimeout extends Error {
  override name = 'TimeoutError'
  constructor(readonly ms: number) {
    super(`no answer within ${ms} ms`)
  }
}
