/**
 * One attempt of an acquire, bounded and raced against the caller's signal, and what its failure means:
 * a grant that lands too late is released, never leaked; an attempt with no answer becomes
 * `BackendUnavailableError`; an acquire that gave up is cleaned up after its last attempt. The acquire
 * loop (acquire-loop.ts) strings attempts together.
 */
import { attach } from './abort.js'
import type { AcquireRequest, AttemptResult, Grant, LeaseFacet } from './backend.js'
import { giveBack, now, sleep, takeController, withTimeout } from './clock.js'
import { BackendUnavailableError, causeText, LockError, type Primitive, subjectOf } from './errors.js'
import { Bound, Scheduler } from './scheduler.js'

/** How long a timed-out attempt waits for the backend's own account of the failure. */
const EXPLAIN_WAIT_MS = 100
/** How long the clean-up of a failed acquire waits for its last attempt to settle before it goes ahead. */
const SETTLE_WAIT_MS = 2000

/** An attempt that outlived its bound (the deadline, or the give-up time of an unreachable store). */
export class AttemptTimeout extends Error {
  override name = 'TimeoutError'
  constructor(readonly ms: number) {
    super(`no answer within ${ms} ms`)
  }
}

/**
 * The bounds of a client's attempts, on one timer (a timer of their own cost each attempt a Node timer
 * list made and dropped, its duration being new each time). Ref'd while an attempt is bounded: an
 * acquire the caller awaits keeps the process alive, as a timer of its own did.
 */
export type AttemptBounds = Scheduler<Bound>

export function attemptBounds(): AttemptBounds {
  return new Scheduler<Bound>(
    (due) => {
      for (const bound of due) bound.controller.abort(new AttemptTimeout(Math.round(bound.ms)))
    },
    { keepAlive: true },
  )
}

/** Who runs attempts: told of each as soon as the backend has it (the clean-up of a failed acquire waits for it). */
export interface AttemptTracker {
  sent(attempt: Promise<AttemptResult>): void
}

/**
 * One attempt, raced against the signal and bounded by `boundMs` on `bounds`. A grant that lands after an
 * abort or the bound is released, never leaked; `tracker` receives the backend's own promise, which the
 * clean-up of a failed acquire waits for.
 */
export function boundedAttempt(
  backend: LeaseFacet,
  req: AcquireRequest,
  signal: AbortSignal,
  bounds: AttemptBounds,
  boundMs: number,
  tracker: AttemptTracker,
): Promise<AttemptResult> {
  // A pooled controller (a new one costs several microseconds, a large share of an in-memory cycle):
  // backends detach their listeners when a call settles, so one that did not abort is safe to reuse.
  const link = takeController()
  const detach = attach(signal, link)
  const bound = new Bound(link, boundMs)
  bounds.schedule(bound, now() + boundMs)
  let attempt: Promise<AttemptResult>
  try {
    attempt = backend.tryAcquire(req, link.signal)
  } catch (error) {
    attempt = Promise.reject(error)
  }
  tracker.sent(attempt)
  const done = () => {
    bounds.cancel(bound)
    detach()
    giveBack(link)
  }
  if (link.signal.aborted) {
    done()
    releaseLate(backend, req, attempt)
    return Promise.reject(link.signal.reason)
  }
  return new Promise((resolve, reject) => {
    // Through `attach`, like the backend's own race: the pooled signal keeps one listener for good.
    const stopListening = attach(link.signal, {
      abort(reason: unknown) {
        done()
        releaseLate(backend, req, attempt)
        if (!(reason instanceof AttemptTimeout)) return reject(reason)
        void explainTimeout(attempt, reason).then(reject)
      },
    })
    attempt.then(
      (result) => {
        stopListening()
        done()
        resolve(result)
      },
      (error) => {
        stopListening()
        done()
        reject(error)
      },
    )
  })
}

/**
 * Our own bound passed: the backend, which races the same signal, usually says at once what it was
 * waiting for (a connection refused, a TLS handshake failing): that beats "no answer".
 */
async function explainTimeout(attempt: Promise<AttemptResult>, timeout: AttemptTimeout): Promise<unknown> {
  const stop = new AbortController()
  const error = await Promise.race([
    attempt.then(
      () => timeout,
      (error: unknown) => error,
    ),
    sleep(EXPLAIN_WAIT_MS, stop.signal),
  ])
  stop.abort()
  return error instanceof BackendUnavailableError ? error : timeout
}

/** Releases what an attempt whose caller stopped listening was granted after all. */
function releaseLate(backend: LeaseFacet, req: AcquireRequest, attempt: Promise<AttemptResult>): void {
  attempt.then(
    (result) => (result.granted ? releaseQuietly(backend, req, result) : undefined),
    () => {},
  )
}

/** Best effort: the lease ends by its ttl anyway if this fails. */
export async function releaseQuietly(backend: LeaseFacet, req: AcquireRequest, grant: Grant): Promise<void> {
  const lease = { key: req.key, owner: req.owner, fence: grant.fence, cookie: grant.cookie }
  await withTimeout(grant.ttlMs, (s) => backend.release(lease, s)).catch(() => {})
}

/** What a failed call on the store means for the caller: its own `LockError`, or the store unavailable. */
export function unavailableError(
  backend: LeaseFacet,
  key: string,
  error: unknown,
  what: string,
  primitive?: Primitive,
): LockError {
  if (error instanceof LockError) return error
  const subject = subjectOf(primitive, key)
  if (error instanceof AttemptTimeout) {
    return new BackendUnavailableError(
      `Could not ${what} ${subject}: ${backend.id} did not answer within ${error.ms} ms`,
      { key, backend: backend.id, cause: error },
    )
  }
  return new BackendUnavailableError(
    `Could not ${what} ${subject}: ${backend.id} failed (${causeText(error)})`,
    { key, backend: backend.id, cause: error },
  )
}

/**
 * The clean-up of an acquire that gave up: `backend.abandon`, once `last` (its latest attempt as the
 * backend runs it) has settled, so the clean-up is the last word on what that attempt did. A hung attempt
 * is not waited for beyond SETTLE_WAIT_MS: the clean-up then goes first, best effort. Bounded by the ttl;
 * never rejects, so a backend bug (even a synchronous throw) never replaces the acquire's error.
 */
export function abandonAfter(
  backend: LeaseFacet,
  req: AcquireRequest,
  last: Promise<unknown> | undefined,
): Promise<void> {
  return (async () => {
    if (last) await settledOrLate(last)
    await withTimeout(req.ttlMs, (s) => backend.abandon(req, s))
  })().catch(() => {})
}

/**
 * Waits until `attempt` settles, SETTLE_WAIT_MS at most. A plain timer, cleared as soon as the attempt
 * settles (a listener on a pooled signal would outlive this wait), and unref'd: a clean-up in the
 * background never keeps a process alive by itself (a CLI that gave up exits on time; the lease ends by
 * its ttl).
 */
async function settledOrLate(attempt: Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, SETTLE_WAIT_MS)
    timer.unref()
  })
  await Promise.race([attempt.catch(() => {}), late])
  clearTimeout(timer)
}
