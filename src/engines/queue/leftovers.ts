/**
 * Entries that a failed release or clean-up left in a lock's queue, deleted once the store answers again
 * (engine.ts).
 *
 * A release or an abandon whose delete fails (the store unreachable, a leader crash) retires the entry's
 * sessions: they take no new users and are revoked, taking the entry with them, once their last user
 * leaves. But those last users may be this client's own waiters for the same lock, queued behind that very
 * entry: they keep the session alive and wait behind it for as long as they wait (for ever without a
 * timeout), and so does everyone else. So the delete is also sent again, with backoff, until the store
 * answers it (deleted, or found gone), every session that may carry the entry has ended (revoked by us, so
 * no longer kept alive, or reported lost: the entry goes with its lease), or the engine closes. Each try is
 * one request as owner-safe as the first (by the entry's position, or by a name unique to the acquire).
 */
import { jitter } from '../../core/clock.js'
import type { Session } from '../session/pool.js'

/** The first wait before a delete is sent again, doubled after each failure up to LEFTOVER_RETRY_MAX_MS. */
const LEFTOVER_RETRY_FIRST_MS = 200
/** A leader election takes a second or two: tries a second or so apart find the new leader soon after. */
const LEFTOVER_RETRY_MAX_MS = 1500

export class Leftovers {
  readonly #timers = new Set<NodeJS.Timeout>()
  #closed = false

  /**
   * Sends `remove` again after a pause, and again after each failure, while one of `sessions` may still
   * keep the entry alive. `remove` is one owner-safe delete; its answer (deleted or gone) ends the tries.
   */
  retry(remove: () => Promise<unknown>, sessions: ReadonlyArray<Session<unknown, unknown>>): void {
    const wanted = () =>
      !this.#closed && sessions.some((session) => !session.revoked && !session.lost.aborted)
    const schedule = (waitMs: number) => {
      if (!wanted()) return
      const timer = setTimeout(() => {
        this.#timers.delete(timer)
        if (!wanted()) return
        remove().catch(() => schedule(Math.min(waitMs * 2, LEFTOVER_RETRY_MAX_MS)))
      }, jitter(waitMs))
      // A leftover never keeps the process alive: without us its lease expires by itself.
      timer.unref()
      this.#timers.add(timer)
    }
    schedule(LEFTOVER_RETRY_FIRST_MS)
  }

  /** Stops every pending try (closing: every session is revoked next). */
  close(): void {
    this.#closed = true
    for (const timer of this.#timers) clearTimeout(timer)
    this.#timers.clear()
  }
}
