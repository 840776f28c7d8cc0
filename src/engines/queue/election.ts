/**
 * Leader election on the queue-lock engine (engine.ts), the same for every store on it (etcd,
 * ZooKeeper): a campaign is an acquire in the election's own queue, whose entry holds the candidate's
 * value; the first entry leads, its position (the fence) is the term. This file adds what a lock lacks:
 * `proclaim` (the adapter's conditional write of our entry's value, by its position) on top of the lock's
 * primitives. The store's layout (the election's queue, the entry's value) is the adapter's; its reads
 * (`inspect`) and its observers' notification (`watch`) are the backend's. backend.ts puts the facet
 * beside the mutex.
 */
import type { ElectionFacet, HeldLease, LeaseFacet, ProclaimResult } from '../../core/backend.js'
import type { QueueAdapters } from './adapter.js'
import { type Acquisition, QueueLock } from './engine.js'
import { queueLeasedMethods } from './leased-methods.js'

/**
 * What a store gives for its elections: the elections' queue (an adapter that writes the candidate's value
 * and can proclaim) and its leases, who leads (`inspect`, whose failures it says itself), the observers'
 * watch, and what those watches hold.
 */
export interface QueueElectionParts<Id, Entry>
  extends QueueAdapters<Id, Entry>,
    Pick<LeaseFacet, 'inspect'>,
    Pick<ElectionFacet, 'watch'> {
  /** Ends what the observers' watches hold (the engine closes its queue itself). */
  close?(): void
}

/**
 * The election facet over `parts`' queue, named and limited as `named` says, and what its close must end.
 * Failures are said by `unavailable(key, what, error)`, as for the lock.
 */
export function queueElection<Id, Entry>(
  parts: QueueElectionParts<Id, Entry>,
  named: Pick<LeaseFacet, 'id' | 'capabilities' | 'limits'>,
  unavailable: (key: string, what: string, error: unknown) => Error,
): { readonly facet: ElectionFacet; close(): Promise<void> } {
  const queue = new QueueLock(parts.queue, parts.leases)
  const facet: ElectionFacet = {
    ...named,
    inspect: parts.inspect,
    ...(parts.watch ? { watch: parts.watch } : {}),
    ...queueLeasedMethods(queue, unavailable),
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
  return {
    facet,
    close: async () => {
      parts.close?.()
      await queue.close()
    },
  }
}
