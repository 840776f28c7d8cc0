/**
 * The acquire loop's wake-up hint: the backend's `waitForChange`, armed, raced against the loop's poll,
 * and disarmed. A hint is only ever news to re-check, or a grant a fair queue handed over.
 */
import { type LinkedAbort, linkedAbort } from './abort.js'
import type { AcquireRequest, Grant, LeaseFacet } from './backend.js'
import { now } from './clock.js'

/**
 * The reason for ending a wait's own timer and hint: a shared value, since `abort()` without one builds a
 * DOMException with a stack trace on every wait (measurable when many waiters wake per release).
 */
export const WAIT_OVER = Object.freeze({ name: 'WaitOver', message: 'the wait is over' })
/** A hint that settles faster than this after being armed, twice in a row, is ignored for one wait. */
const INSTANT_HINT_MS = 1

/**
 * The wake-up hint for the next wait. It is armed *before* the attempt that precedes the wait, so a
 * release landing between a failed attempt and the wait is never missed.
 */
export class WakeHint {
  /** Settles with a grant a fair queue handed over, or undefined for a plain hint (or a failed one). */
  readonly promise: Promise<Grant | undefined>
  readonly #cancel: LinkedAbort
  readonly #armedAt: number
  #settledAt: number | undefined
  #disarmed = false

  /** A hint from `backend`, or undefined when it gives none (the loop then polls alone). */
  static arm(backend: LeaseFacet, req: AcquireRequest, signal: AbortSignal): WakeHint | undefined {
    return backend.waitForChange ? new WakeHint(backend, req, signal) : undefined
  }

  private constructor(backend: LeaseFacet, req: AcquireRequest, signal: AbortSignal) {
    this.#cancel = linkedAbort(signal)
    this.#armedAt = now()
    let promise: Promise<Grant | undefined>
    try {
      promise = (backend.waitForChange?.(req, this.#cancel.signal) ?? Promise.resolve()).then(
        (g) => (g && g.granted === true ? g : undefined),
        () => undefined,
      )
    } catch {
      promise = Promise.resolve(undefined)
    }
    promise.then(() => {
      this.#settledAt = now()
    })
    this.promise = promise
  }

  /** It has settled (news, a grant, or a failure): the next wait needs a new one. */
  get settled(): boolean {
    return this.#settledAt !== undefined
  }

  /** It settled the moment it was armed: a watch that cannot be set up, no news. */
  get instant(): boolean {
    return this.#settledAt !== undefined && this.#settledAt - this.#armedAt < INSTANT_HINT_MS
  }

  /**
   * Stops the backend's wait. The abort runs after the current turn, off the path of the grant or the
   * next attempt that usually follows (an abort dispatches an Event: about 5 µs in Node 20). Until then a
   * hint that has not settled may still settle: nobody reads it any more, and a plain hint only asks for a
   * re-check. Detached from the loop's signal at once, so a later abort of that signal does not reach it.
   */
  disarm(): void {
    if (this.#disarmed) return
    this.#disarmed = true
    this.#cancel.dispose()
    const cancel = this.#cancel
    setImmediate(() => cancel.abort(WAIT_OVER))
  }
}
