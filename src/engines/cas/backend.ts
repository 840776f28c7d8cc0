/**
 * How a store plugs into the cas-lease engine (engine.ts; S3, GCS, DynamoDB): `casLeaseBackend` returns
 * the backend object. The mutex's leased methods, its resume (resume.ts) and an operator's list and break
 * forward to one engine over the adapter's locks; the election facet (election.ts), where the store gives
 * an adapter of an elections' namespace, to another engine over it. The adapters are the whole store part: the locks'
 * doctor is the backend's, and list is offered only where the adapter can list its store.
 */
import type { LockBackend, MultiKeyFacet } from '../../core/backend.js'
import type { CasAdapter } from './adapter.js'
import { casElection } from './election.js'
import { CasLease, type CasLeaseOptions, casLeaseFacet } from './engine.js'

/**
 * A LockBackend over `adapter`: the cas-lease engine, with elections over `elections` (an adapter of a
 * namespace no lock's record can be in) when given. Its close sends both engines' pending retires first,
 * then closes the elections' adapter and the locks' (which may end the client both share).
 */
export function casLeaseBackend(
  adapter: CasAdapter,
  options: CasLeaseOptions = {},
  elections?: CasAdapter,
): LockBackend {
  const engine = new CasLease(adapter, options)
  const election = elections && casElection(elections, options)
  const backend: LockBackend = {
    ...casLeaseFacet(engine, adapter, options.id ?? adapter.id),
    ...(election ? { election: election.facet } : {}),
    resume: engine.resume,
    ...atomicSets(engine, adapter),
    breakLock: (key, options) => engine.operations.breakLock(key, options),
    close: async () => {
      await Promise.all([engine.retirer.close(), election?.close()])
      await elections?.close()
      await adapter.close()
    },
  }
  const doctor = adapter.doctor?.bind(adapter)
  // Only where the adapter can list its store: the client says so for one that cannot.
  const list: LockBackend['list'] =
    adapter.list && ((prefix, signal) => engine.operations.list(prefix, signal))
  return { ...backend, ...(doctor ? { doctor } : {}), ...(list ? { list } : {}) }
}

/**
 * Atomic sets (`acquireAll(keys, { atomic: true })`) where the adapter writes several records in one
 * transaction (DynamoDB), up to its limit of writes; else why not (S3, GCS).
 */
function atomicSets(
  engine: CasLease,
  adapter: CasAdapter,
): { readonly multiKey: MultiKeyFacet } | { readonly multiKeyRefusal: string } {
  if (!adapter.transact) {
    return { multiKeyRefusal: 'this store has no conditional write of several records at once' }
  }
  const limit = adapter.transactLimit ?? Number.POSITIVE_INFINITY
  return {
    multiKey: {
      refusal: (keys) =>
        keys.length <= limit
          ? undefined
          : `${keys.length} keys are more than the ${limit} writes one transaction of the store takes. ` +
            `Split the set into atomic sets of at most ${limit} keys taken in a fixed order`,
      tryAcquireAll: (reqs, signal) => engine.attemptAll(reqs, signal),
    },
  }
}
