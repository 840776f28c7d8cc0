/**
 * Leader election on the `cas-lease` engine (S3, GCS, DynamoDB): the engine instantiated a second time,
 * over an adapter of the elections' namespace (an object prefix, a reserved key prefix: each backend's
 * layout.ts), so a campaign is an acquire of that instance, and leadership a lease renewed, fenced,
 * taken over and retired exactly as a lock's. What an election adds:
 *
 * - The leader's value, in the record (`value`, record.ts): written by the grant, and by every later
 *   write of the hold (renewals and releases rewrite it as it is).
 * - Proclaim (hold.ts): a renewal's write carrying the new value, conditioned on the version our last
 *   write left (owner, fence and nonce checked on a refusal): a leader taken over can no longer write.
 *   It counts against the store's write rate as a renewal does (GCS: one write a second per object,
 *   shared with the renewals); its cookie is the hold, with the new version.
 * - The view observers read (`inspect`): the record's leader and value, with two vacancies the mutex's
 *   view shows as held: a placeholder still marked fresh (its candidate's grant waits for the store's
 *   clock, engine.ts: nobody leads yet), and a held record this process has seen unchanged for its lease
 *   plus the margin (its leader stopped renewing and cannot count on it any more: the takeover rule). A
 *   candidate waiting in this process would take it over at that same moment.
 * - No watch: the stores cannot notify, so observers read once a second (src/core/election.ts). Each
 *   read is one strongly consistent GET (GetItem).
 *
 * Terms are the record's fences: a takeover or a grant after a resign takes the next, and a record
 * deleted (retired after a resign, retire.ts, or behind our back) is made again above every earlier
 * one (fence.ts), so terms strictly increase across a retire too.
 */
import type { ElectionFacet, LockInfo } from '../../core/backend.js'
import { now } from '../../core/clock.js'
import type { CasAdapter } from './adapter.js'
import { CasLease, type CasLeaseOptions, casLeaseFacet } from './engine.js'
import { recordView } from './operations.js'

const FRESH_NOTE =
  'a candidate is about to lead: its grant waits for the store clock to settle the term (a new record)'
const EXPIRED_NOTE =
  'the last leader stopped renewing: its record was seen unchanged for its lease plus a margin, so the ' +
  'next candidate takes over'

/**
 * The election facet over `adapter` (the elections' namespace): a cas-lease engine of its own, and what
 * its close must end (that engine's pending retires). backend.ts puts it beside the mutex.
 */
export function casElection(
  adapter: CasAdapter,
  options: CasLeaseOptions = {},
): { readonly facet: ElectionFacet; close(): Promise<void> } {
  const engine = new CasLease(adapter, options)
  const facet: ElectionFacet = {
    ...casLeaseFacet(engine, adapter, options.id ?? adapter.id),
    inspect: (key, signal) => leaderView(engine, key, signal),
    proclaim: (lease, value, signal) => engine.holds.proclaim(lease, value, signal),
  }
  return { facet, close: () => engine.retirer.close() }
}

/** Who leads `key` as this process sees it (module header: the two vacancies). */
async function leaderView(engine: CasLease, key: string, signal: AbortSignal): Promise<LockInfo | null> {
  const { seen, takeoverAt } = await engine.look(key, signal)
  if (seen === undefined) return null
  const record = seen.record
  if (record?.state === 'held' && record.fresh) return { held: false, note: FRESH_NOTE }
  if (record?.state === 'held' && takeoverAt !== undefined && now() >= takeoverAt) {
    return { held: false, fence: record.fence, note: EXPIRED_NOTE }
  }
  return recordView(record, now() - seen.since, engine.id)
}
