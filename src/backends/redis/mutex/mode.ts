/**
 * What differs between the modes of the Redis mutex (plain.ts, fair.ts, and Redlock's line): the scripts
 * an attempt, a release, a break and an abandon run, and which messages wake a waiter. The rest of the
 * mutex (facet.ts) is the same in every mode.
 */
import type { AcquireRequest, AttemptResult, Grant } from '../../../core/backend.js'

/**
 * What differs between plain and fair mode (and Redlock's line). `R` is the request an attempt carries:
 * the core's `AcquireRequest`, or a request with more in it (a Redlock node's waiter and ticket), typed
 * through from the caller of `tryAcquire` to the mode's script.
 */
export interface Mode<R extends AcquireRequest = AcquireRequest> {
  /** Waiters are served in arrival order. */
  readonly fifo: boolean
  /** One acquire attempt: the script's reply, {1, fence} or {0, ms worth waiting (0: unknown)}. */
  acquire(req: R, signal: AbortSignal): Promise<unknown>
  /** Owner-checked release; false when the lock was no longer ours. */
  release(lease: { key: string; owner: string }): Promise<boolean>
  /**
   * Ends whichever lease holds `key` (only the grant of `fence`, when given) and wakes waiters as a release
   * does: the reply of BREAK (scripts.ts). Absent where a lease is ended otherwise (Redlock's nodes).
   */
  breakLock?(key: string, fence: bigint | undefined): Promise<unknown>
  /** Removes whatever `req.owner` may hold or have queued for `req.key`, owner-checked. */
  abandon(req: R): Promise<unknown>
  /** The owner whose messages wake this waiter, or undefined when any message does. */
  listener(req: AcquireRequest): string | undefined
  /** The channel this waiter listens on. @default the key's own channel (`keysOf(key).channel`) */
  channel?(req: AcquireRequest): string
  /** The grant that the message which woke `req` handed to it, if it did. */
  handedOver(req: AcquireRequest, message: string | undefined): Grant | undefined
  /**
   * The attempt's result from its acquire script's reply, when the mode's script answers more than
   * {granted, fence | ms} (Redlock's line: the waiter's ticket too). @default grantOf
   */
  answer?(reply: unknown, ttlMs: number): AttemptResult
}
