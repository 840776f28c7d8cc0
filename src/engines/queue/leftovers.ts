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
 * `removeAbandoned` is the clean-up of an acquire given up, which both queue engines run alike.
 */
import { jitter } from '../../core/clock.js'
import type { Session } from '../session/pool.js'

/** The first wait before a delete is sent again, doubled after each failure up to LEFTOVER_RETRY_MAX_MS. */
const LEFTOVER_RETRY_FIRST_MS = 200
/** A leader election takes a second or two: tries a second or so apart find the new leader soon after. */
const LEFTOVER_RETRY_MAX_MS = 1500

/** An acquire given up, as its clean-up sees it (`Leftovers.removeAbandoned`). */
export interface Abandoned<S> {
  /** The sessions its writes used. */
  readonly sessions: readonly S[]
  /** Its writes still in flight: the names are read once they have settled. */
  readonly inflight: Promise<unknown> | undefined
  /** The names its writes put, each holding the acquire's owner id. */
  names(): string[]
  removeNames(names: string[]): Promise<unknown>
  /** Retires a session (a delete failed: the session takes the entries with it when it ends). */
  retire(session: S): void
  /** Runs last, whatever happened. */
  end(): void
}

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

  /**
   * Deletes whatever an acquire given up may have put, once its writes have settled. A failed delete is sent
   * again (`retry`) and retires the sessions that may carry the entries; the error is rethrown.
   */
  async removeAbandoned<S extends Session<unknown, unknown>>(acq: Abandoned<S>): Promise<void> {
    try {
      // The writes must have landed (or failed) first: a delete sent before one would leave its entry.
      await acq.inflight
      const names = acq.names()
      if (names.length === 0) return
      // By name, unconditionally: the names hold our owner id, which nobody else writes, and whatever
      // the abort raced with (the write, its reply, the keep-alive after it, a hand-over), the entry is
      // ours to remove.
      await acq.removeNames(names).catch((error: unknown) => {
        // As for a release: our own waiters behind them may keep their session alive.
        this.retry(() => acq.removeNames(names), acq.sessions)
        throw error
      })
    } catch (error) {
      for (const session of acq.sessions) acq.retire(session)
      throw error
    } finally {
      acq.end()
    }
  }

  /** Stops every pending try (closing: every session is revoked next). */
  close(): void {
    this.#closed = true
    for (const timer of this.#timers) clearTimeout(timer)
    this.#timers.clear()
  }
}
