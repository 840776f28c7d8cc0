/**
 * The leased methods of a primitive on the queue-lock engine (engine.ts), the same for every store (etcd,
 * ZooKeeper) and primitive (the mutex: backend.ts; an election: election.ts): each forwards to the engine,
 * and says a failure in the backend's words.
 */
import type { AcquireRequest, AttemptResult, ExtendResult, Grant, HeldLease } from '../../core/backend.js'
import type { Acquisition, QueueLock } from './engine.js'

/** The leased methods of a primitive on a queue engine. */
export interface QueueLeasedMethods {
  tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult>
  /** Never fails: a wait that cannot go on ends, and the core's next attempt says why. */
  waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<Grant | undefined>
  extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult>
  release(lease: HeldLease, signal: AbortSignal): Promise<boolean>
  abandon(req: AcquireRequest, signal: AbortSignal): Promise<void>
}

/**
 * The leased methods over `queue`, the same for every store and primitive: an abort rethrows its reason
 * unchanged; any other failure becomes the error `unavailable(key, what, error)` makes.
 */
export function queueLeasedMethods<Id, Entry>(
  queue: QueueLock<Id, Entry>,
  unavailable: (key: string, what: string, error: unknown) => Error,
): QueueLeasedMethods {
  const guard = async <T>(key: string, what: string, signal: AbortSignal, step: () => Promise<T>) => {
    try {
      return await step()
    } catch (error) {
      if (signal.aborted) throw signal.reason
      throw unavailable(key, what, error)
    }
  }
  return {
    tryAcquire: (req, signal) => guard(req.key, 'acquire', signal, () => queue.attempt(req, signal)),
    waitForChange: (req, signal) => queue.wait(req, signal),
    extend: (lease, ttlMs, signal) =>
      guard(lease.key, 'extend', signal, () => queue.extend(lease.cookie as Acquisition<Id>, ttlMs, signal)),
    // A release is never given up by an abort of ours: any failure is the store's.
    release: async (lease, signal) => {
      try {
        return await queue.release(lease.cookie as Acquisition<Id>, signal)
      } catch (error) {
        throw unavailable(lease.key, 'release', error)
      }
    },
    abandon: (req, signal) => guard(req.key, 'clean up', signal, () => queue.abandon(req, signal)),
  }
}
