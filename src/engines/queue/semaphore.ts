/**
 * Counting semaphores on the queue engine (semaphore-engine.ts), the same for every store whose adapter
 * keeps a semaphore's line (etcd): the leased methods forward to the engine and say a failure in the
 * backend's words; a `LimitMismatchError` passes unchanged. The store's reads (`holders`, `inspect`) are
 * the backend's. backend.ts puts the facet beside the mutex.
 */
import type { LeaseFacet, SemaphoreFacet } from '../../core/backend.js'
import { LockError } from '../../core/errors.js'
import type { SessionAdapter } from '../session/adapter.js'
import type { SemaphoreAdapter } from './semaphore-adapter.js'
import { type PermitAcquisition, QueueSemaphore } from './semaphore-engine.js'

/** What a store gives for its semaphores: the line's adapter, its leases, and its own reads. */
export interface QueueSemaphoreParts<Id> extends Pick<SemaphoreFacet, 'holders' | 'inspect'> {
  readonly queue: SemaphoreAdapter<Id>
  readonly leases: SessionAdapter<Id>
}

/**
 * The semaphore facet over `parts`, named and limited as `named` says, and what its close must end.
 * Failures are said by `unavailable(key, what, error)`.
 */
export function queueSemaphore<Id>(
  parts: QueueSemaphoreParts<Id>,
  named: Pick<LeaseFacet, 'id' | 'capabilities' | 'limits'>,
  unavailable: (key: string, what: string, error: unknown) => Error,
): { readonly facet: SemaphoreFacet; close(): Promise<void> } {
  const engine = new QueueSemaphore(parts.queue, parts.leases, named.id)
  const guard = async <T>(key: string, what: string, signal: AbortSignal, step: () => Promise<T>) => {
    try {
      return await step()
    } catch (error) {
      if (signal.aborted) throw signal.reason
      // Ours already (a limit mismatch), or the store's reads, which say their failures themselves.
      if (error instanceof LockError) throw error
      throw unavailable(key, what, error)
    }
  }
  const cookie = (held: { readonly cookie: unknown }) => held.cookie as PermitAcquisition<Id>
  const facet: SemaphoreFacet = {
    ...named,
    tryAcquire: (req, signal) =>
      guard(req.key, 'acquire permits of', signal, () => engine.attempt(req, signal)),
    waitForChange: (req, signal) => engine.wait(req, signal).catch(() => undefined),
    extend: (lease, _ttlMs, signal) =>
      guard(lease.key, 'extend permits of', signal, () => engine.extend(cookie(lease), signal)),
    // A release is never given up by an abort of ours: any failure is the store's.
    release: async (lease, signal) => {
      try {
        return await engine.release(cookie(lease), signal)
      } catch (error) {
        throw unavailable(lease.key, 'release permits of', error)
      }
    },
    abandon: (req, signal) => guard(req.key, 'clean up', signal, () => engine.abandon(req, signal)),
    setLimit: (name, limit, signal) =>
      guard(name, 'set the limit of', signal, () => engine.setLimit(name, limit, signal)),
    holders: parts.holders,
    inspect: parts.inspect,
  }
  return { facet, close: () => engine.close() }
}
