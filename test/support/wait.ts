/**
 * Waiting in tests, one family: poll until a condition holds (`waitUntil` fails when it never does;
 * `pollUntil` hands back the last value for the test to assert on), or wait for a signal to abort
 * (`abortedAt`, `abortedWithin`). Every wait has a bound, and the bound is a generous liveness limit,
 * never a speed claim.
 */
import { sleep } from './time.js'

export interface WaitOptions {
  /** Gives up after this long, in ms. @default 5000 */
  readonly withinMs?: number
  /** Time between two checks, in ms. @default 10 */
  readonly everyMs?: number
  /** Ends the wait at once with the signal's reason (e.g. the process waited on has exited). */
  readonly signal?: AbortSignal
}

/**
 * Reads `read()` until `done` holds for its value or `withinMs` passes, and returns the last value read:
 * the test asserts on it, so a wait that gives up fails with the test's own message. An error thrown by
 * `read` ends the wait (it is the test's failure).
 */
export async function pollUntil<T>(
  read: () => T | Promise<T>,
  done: (value: T) => boolean,
  { withinMs = 5000, everyMs = 10, signal }: WaitOptions = {},
): Promise<T> {
  const giveUpAt = performance.now() + withinMs
  for (;;) {
    signal?.throwIfAborted()
    const value = await read()
    if (done(value) || performance.now() > giveUpAt) return value
    await sleep(everyMs, signal)
  }
}

/**
 * Polls `check` until it holds. A check that throws counts as "not yet" (a server still starting refuses
 * connections); the last such error is named when the wait gives up.
 * @throws {Error} "timed out after <withinMs> ms waiting for <what>", or `signal.reason` once it aborts
 */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  what: string | (() => string),
  options: WaitOptions = {},
): Promise<void> {
  let lastError: unknown
  const holds = async () => {
    try {
      return await check()
    } catch (error) {
      lastError = error
      return false
    }
  }
  if (await pollUntil(holds, Boolean, options)) return
  const described = typeof what === 'string' ? what : what()
  const last = lastError === undefined ? '' : ` (last check failed: ${(lastError as Error).message})`
  throw new Error(`timed out after ${options.withinMs ?? 5000} ms waiting for ${described}${last}`)
}

/**
 * Resolves with `signal.reason` and the monotonic instant (`performance.now()`) it aborted; rejects after
 * `withinMs`. Its timer is ref'd on purpose: fencelock's own renewal and expiry timers are unref'd (they
 * never keep a process alive), so a test that only awaits a lock's signal needs something to keep the
 * event loop running.
 */
export function abortedAt(signal: AbortSignal, withinMs = 5000): Promise<{ reason: unknown; at: number }> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve({ reason: signal.reason, at: performance.now() })
    const timer = setTimeout(() => reject(new Error(`signal did not abort within ${withinMs} ms`)), withinMs)
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer)
        resolve({ reason: signal.reason, at: performance.now() })
      },
      { once: true },
    )
  })
}

/** Resolves with `signal.reason` when `signal` aborts; rejects after `timeoutMs` (see `abortedAt`). */
export async function abortedWithin(signal: AbortSignal, timeoutMs: number): Promise<unknown> {
  return (await abortedAt(signal, timeoutMs)).reason
}
