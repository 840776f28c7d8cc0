/**
 * Leader election on the queue-lock engine (queue-lock.ts), the same for every store on it (etcd,
 * ZooKeeper): a campaign is an acquire in the election's own queue, whose entry holds the candidate's
 * value; the first entry leads, its position (the fence) is the term. This file adds what a lock lacks:
 * `proclaim` (the adapter's conditional write of our entry's value, by its position) on top of the lock's
 * primitives. The store's layout (the election's queue, the entry's value) is the adapter's; its reads
 * (`inspect`) and its observers' notification (`watch`) are the backend's.
 */
import type { ElectionFacet, HeldLease, LeaseFacet, ProclaimResult } from '../../core/backend.js'
import { queueBackendMethods } from './backend-methods.js'
import type { Acquisition, QueueLock } from './engine.js'

/** What a backend gives for its election facet beside the engine: its name, limits, and reads. */
export type ElectionReads = Pick<LeaseFacet, 'id' | 'capabilities' | 'limits' | 'inspect'> &
  Pick<ElectionFacet, 'watch'>

/**
 * The election facet over `queue` (an engine whose adapter writes the candidate's value and can proclaim),
 * with the backend's reads. Failures are said by `unavailable(key, what, error)`, as for the lock.
 */
export function queueElection<Id, Entry>(
  queue: QueueLock<Id, Entry>,
  reads: ElectionReads,
  unavailable: (key: string, what: string, error: unknown) => Error,
): ElectionFacet {
  return {
    ...reads,
    ...queueBackendMethods(queue, unavailable),
    async proclaim(lease: HeldLease, value: string, signal: AbortSignal): Promise<ProclaimResult> {
      try {
        const done = await queue.proclaim(lease.cookie as Acquisition<Id>, value, signal)
        return done ? { proclaimed: true } : { proclaimed: false }
      } catch (error) {
        if (signal.aborted) throw signal.reason
        throw unavailable(lease.key, 'proclaim a value for', error)
      }
    },
  }
}
