/**
 * Leader election on the sql-lease engine: the same engine instantiated a second time, over an elections
 * table of its own beside the lock table (`<table>_elections`: the lock table's columns plus the leader's
 * `value`), so a lock and an election of the same name never meet, and the users' lock tables are never
 * altered. Whoever holds an election's row leads; everything of the mutex holds for it as is: one
 * statement per primitive on the server's clock, the fence from a source that outlives the row (the
 * elections table's own: a retired election's next term is still greater), retiring, abandon, waiting.
 *
 * - Term: the row's fence.
 * - Campaign: the acquire statement, which also stores the candidate's value (and, where the adapter
 *   notifies, notifies the grant, for observers).
 * - Proclaim: ONE UPDATE of the value conditioned on the key, our owner and fence, not released and the
 *   lease not ended on the server's clock. An uncertain outcome is settled by re-reading the row, as an
 *   extend's is: not ours any more → not proclaimed (leadership lost); ours with the new value → done;
 *   else unknown.
 * - Watch (observers): where the adapter notifies (PostgreSQL), every grant, proclaim and release of the
 *   elections table is notified on its channel, and an observer wakes at the next one of its election
 *   (sql-wait.ts, `observe`). Without notifications (MySQL/MariaDB) there is no `watch`: observers read once
 *   a second (the core's pace).
 *
 * Statements, without faults: campaign 1, renewal 1, proclaim 1, resign 1, a read 1; an observer 1 per
 * change (PostgreSQL) or 1 per second (MySQL/MariaDB).
 */
import type { DoctorFinding, ElectionFacet, HeldLease, ProclaimResult } from '../../core/backend.js'
import type { SqlAdapter } from './adapter.js'
import { SqlLease, type SqlLeaseOptions, sqlLeaseFacet } from './engine.js'

/** A adapter over an elections table: one that stores values and proclaims. */
export type SqlElectionAdapter = SqlAdapter & Required<Pick<SqlAdapter, 'proclaim'>>

/**
 * The election facet over `adapter`'s elections table: a sql-lease engine of its own, the table's part of
 * `doctor`, and what its close must end (that engine's subscription). backend.ts puts it beside the mutex.
 */
export function sqlElection(
  adapter: SqlElectionAdapter,
  options: SqlLeaseOptions = {},
): {
  readonly facet: ElectionFacet
  /** The elections table's `doctor` findings (the server's are the mutex's). */
  doctor(signal: AbortSignal): Promise<DoctorFinding[]>
  close(): Promise<void>
} {
  const engine = new SqlLease(adapter, options, 'election')
  const facet: ElectionFacet = {
    ...sqlLeaseFacet(engine, adapter, options.id ?? adapter.id),
    proclaim: (lease, value, signal) => proclaim(adapter, lease, value, signal),
    ...(adapter.listen === undefined
      ? {}
      : { watch: (key: string, signal: AbortSignal) => engine.waiting.observe(key, signal) }),
  }
  return {
    facet,
    doctor: async (signal) => (await engine.tableDoctor(signal)).findings,
    close: () => engine.close(),
  }
}

/** `ElectionFacet.proclaim`: the adapter's UPDATE; an uncertain outcome settled by a read. */
async function proclaim(
  adapter: SqlElectionAdapter,
  lease: HeldLease,
  value: string,
  signal: AbortSignal,
): Promise<ProclaimResult> {
  try {
    return { proclaimed: await adapter.proclaim(lease.key, lease.owner, lease.fence, value, signal) }
  } catch (error) {
    let row: Awaited<ReturnType<SqlAdapter['read']>>
    try {
      row = await adapter.read(lease.key, signal)
    } catch {
      throw error
    }
    const ours =
      row !== undefined &&
      row.owner === lease.owner &&
      row.fence === lease.fence &&
      !row.released &&
      row.remainingMs > 0
    if (!ours) return { proclaimed: false }
    // Ours and showing the new value: whether this statement or an earlier one wrote it, it is published.
    if (row?.value === value) return { proclaimed: true }
    throw error
  }
}
