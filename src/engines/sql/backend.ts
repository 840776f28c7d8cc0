/**
 * How a store plugs into the sql-lease engine (engine.ts; PostgreSQL, MySQL/MariaDB): `sqlLeaseBackend`
 * returns the backend object. The mutex's leased methods and the operator's (list, break, doctor) forward
 * to one engine over the adapter's lock table; the election facet (election.ts), where the store gives an
 * elections table, to another engine over it, whose table findings doctor adds. The adapters are the
 * whole store part: the engine reads, lists and diagnoses through them.
 */
import type { LockBackend } from '../../core/backend.js'
import type { SqlAdapter } from './adapter.js'
import { type SqlElectionAdapter, sqlElection } from './election.js'
import { SqlLease, type SqlLeaseOptions, sqlLeaseFacet } from './engine.js'

/** An elections table's adapter, and its engine's options (the mutex's do not carry over). */
export interface SqlElections {
  readonly adapter: SqlElectionAdapter
  readonly options?: SqlLeaseOptions | undefined
}

/**
 * A LockBackend over `adapter`: the sql-lease engine, with elections over `elections` when given. Its
 * close closes the elections' engine first (its subscription), then the mutex's (whose adapter may end
 * the client both share).
 */
export function sqlLeaseBackend(
  adapter: SqlAdapter,
  options: SqlLeaseOptions = {},
  elections?: SqlElections,
): LockBackend {
  const engine = new SqlLease(adapter, options)
  const mutex: LockBackend = {
    ...sqlLeaseFacet(engine, adapter, options.id ?? adapter.id),
    list: (prefix, signal) => engine.list(prefix, signal),
    breakLock: (key, options) => engine.breakLock(key, options),
    doctor: (signal) => engine.doctor(signal),
    close: () => engine.close(),
  }
  if (elections === undefined) return mutex
  const election = sqlElection(elections.adapter, elections.options)
  return {
    ...mutex,
    election: election.facet,
    doctor: async (signal) => [...(await engine.doctor(signal)), ...(await election.doctor(signal))],
    async close() {
      try {
        await election.close()
      } finally {
        await engine.close()
      }
    },
  }
}
