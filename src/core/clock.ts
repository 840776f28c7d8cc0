import { attach } from './abort.js'
import { Bound, Scheduler } from './scheduler.js'

/** The monotonic clock every validity computation uses, in milliseconds. Never the wall clock. */
export const now = (): number => performance.now()

/**
 * Waits `ms`, or less if `signal` aborts first; never rejects, so callers check `signal.aborted` themselves
 * and rethrow `signal.reason` unchanged. `ref: false` lets the process exit while it waits (renewers);
 * an acquire the caller awaits keeps the process alive.
 */
export function sleep(
  ms: number,
  signal?: AbortSignal,
  { ref = true }: { ref?: boolean } = {},
): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const done = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, timerDelay(ms))
    if (!ref) timer.unref()
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** A wait that can be cut short: `nap`. */
export interface Nap {
  /** Resolves when the time is up, `signal` aborts, or `end()` is called, whichever comes first. */
  readonly promise: Promise<undefined>
  /** Ends the nap now (clears its timer); idempotent. */
  end(): void
}

/**
 * `sleep` for the acquire loop's waits, which usually end early (a wake-up hint wins the race): ending it
 * clears the timer without aborting anything. Aborting an AbortController dispatches an Event, about 5 µs
 * in Node 20, and that was on the path of every hand-over between a release and the next attempt.
 */
export function nap(ms: number, signal: AbortSignal): Nap {
  let end: () => void = () => {}
  const promise = new Promise<undefined>((resolve) => {
    if (signal.aborted) return resolve(undefined)
    let detach: (() => void) | undefined
    const timer = setTimeout(() => end(), timerDelay(ms))
    end = () => {
      clearTimeout(timer)
      detach?.()
      end = () => {}
      resolve(undefined)
    }
    detach = attach(signal, { abort: () => end() })
  })
  return { promise, end: () => end() }
}

/** A uniformly random duration in [ms/2, ms]: spreads contenders so they do not retry in lockstep. */
export function jitter(ms: number): number {
  return ms / 2 + Math.random() * (ms / 2)
}

/** The longest delay a Node timer holds; longer ones fire after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** A delay any Node timer accepts: whole, >= 0 and capped (callers re-check the clock when it fires). */
export function timerDelay(ms: number): number {
  return Math.max(0, Math.min(Math.ceil(ms), MAX_TIMER_MS))
}

/**
 * Controllers whose operation finished without timing out, kept for the next one: creating an
 * AbortController costs several microseconds in Node 20, a quarter of an in-memory lock cycle. Only
 * never-aborted controllers are reused, and backends detach their listeners when an operation settles.
 */
const spare: AbortController[] = []
/**
 * As many as a busy client has operations under way: one that runs 256 acquires and their releases at
 * once has some 500 controllers out, and a pool of 64 made most of them anew.
 */
const MAX_SPARE = 1024

/** A never-aborted controller from the pool (or a new one). Hand it back with `giveBack` once its operation settled. */
export function takeController(): AbortController {
  return spare.pop() ?? new AbortController()
}

/** Returns a controller to the pool, unless it aborted (its signal's listeners then matter to someone). */
export function giveBack(controller: AbortController): void {
  if (!controller.signal.aborted && spare.length < MAX_SPARE) spare.push(controller)
}

/**
 * The bounds of every `withTimeout` in the process, on one unref'd timer: a timer each cost every release
 * and renewal a Node timer made and cleared. Unref'd as those were: the operation's own I/O keeps the
 * process alive while it runs. Made on first use: scheduler.ts reads this module's clock.
 */
let timeouts: Scheduler<Bound> | undefined

/** Aborts each operation whose bound passed. */
function timedOut(due: readonly Bound[]): void {
  for (const { controller, ms } of due) {
    controller.abort(new DOMException(`The operation timed out after ${Math.round(ms)} ms`, 'TimeoutError'))
  }
}

/**
 * Runs `operation` with a signal that aborts after `ms`, and unschedules that as soon as it settles.
 * `operation` also gets the signal's controller, to abort it sooner itself (a renewal given up when its
 * lock is declared lost) without a controller of its own.
 * `AbortSignal.timeout` would cost ~10 µs and leave its timer pending for the whole duration (a lease
 * long) after every renewal and release.
 */
export async function withTimeout<T>(
  ms: number,
  operation: (signal: AbortSignal, controller: AbortController) => Promise<T>,
): Promise<T> {
  const controller = takeController()
  const timeout = new Bound(controller, ms)
  timeouts ??= new Scheduler(timedOut)
  const bounds = timeouts
  bounds.schedule(timeout, now() + Math.max(1, timerDelay(ms)))
  try {
    return await operation(controller.signal, controller)
  } finally {
    bounds.cancel(timeout)
    giveBack(controller)
  }
}
