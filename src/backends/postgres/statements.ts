/**
 * The PostgreSQL statements of the sql-lease engine, for one table: the isolation pin every message starts
 * with, and each primitive's statement. Identifiers are quoted, values are literals.ts's; functions are
 * pg_catalog's, so no search_path reaches them. dialect.ts sends them.
 */
import type { SqlAcquireRequest } from '../../engines/sql-lease-driver.js'
import { fenceSequence, type PgTable, qualified } from './layout.js'
import { bigintLiteral, floatLiteral, regclassLiteral, textLiteral } from './literals.js'

/**
 * The first statement of every message. READ COMMITTED: a statement that meets a row a concurrent one
 * changed waits for it and re-checks the committed row (the acquire then finds it held, or free); under
 * REPEATABLE READ or SERIALIZABLE (a `default_transaction_isolation` of the role, database or server) the
 * same statement fails with SQLSTATE 40001 instead, and SERIALIZABLE's predicate locks fail acquires of
 * other keys on the same index page. READ WRITE: `default_transaction_read_only` would refuse every write.
 */
export const PIN = 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED, READ WRITE'

/**
 * The lease left on the server's clock, in ms (a released row's 1970 `expires_at` makes it very negative).
 * Durations come back as numeric (text on the wire, exact): a float8 is printed with as few digits as
 * `extra_float_digits` asks, one at -15.
 */
const REMAINING = `(extract(epoch from (expires_at - pg_catalog.clock_timestamp())) * 1000)::pg_catalog.numeric`

/** The statements of one table: identifiers are quoted, values are literals.ts's. */
export function statements(t: PgTable) {
  const table = qualified(t)
  const next = `pg_catalog.nextval(${regclassLiteral(qualified(fenceSequence(t)))})`
  const now = 'pg_catalog.clock_timestamp()'
  const text = (value: string | undefined) => (value === undefined ? 'NULL::text' : textLiteral(value))
  return {
    /**
     * Acquire: two statements. The INSERT takes the row when there is none, when it is free on the
     * server's clock or released (a new grant), or when it is held by this same owner (an earlier attempt
     * whose reply was lost: the lease restarts, the fence stays). A new grant's fence is the next value of
     * the table's sequence, and never less than the row's fence + 1: the sequence outlives the row (a
     * DELETE, a TRUNCATE, the table dropped), the row outlives a sequence set back. ON CONFLICT locks the
     * row, so two acquires of a free row are serialised: the second one re-evaluates its WHERE on the
     * first one's row and finds it held. Granted, the lease is the ttl the statement added to
     * `clock_timestamp()` (exactly; it started after our send). Refused, the second branch reports the
     * holder's row as of the statement's snapshot (for pacing only; possibly a moment old).
     *
     * A new row is inserted with fence 0 and given its fence by the second statement, in the same
     * transaction (nobody sees the 0): VALUES are computed before ON CONFLICT looks for the row, and
     * looks again after waiting for a concurrent grant, so a value drawn there could predate that grant,
     * whose row a DELETE removed meanwhile. Drawn after the insert, the fence follows every earlier grant.
     */
    acquire: (req: SqlAcquireRequest) => {
      const key = textLiteral(req.key)
      const owner = textLiteral(req.owner)
      const ttl = floatLiteral(req.ttlMs)
      return `WITH granted AS (
  INSERT INTO ${table} AS l (name, owner, fence, expires_at, released, holder)
  VALUES (${key}, ${owner}, 0, ${now} + ${ttl} * interval '1 millisecond', false, ${text(req.holder)})
  ON CONFLICT (name) DO UPDATE SET
    fence = CASE WHEN l.owner = excluded.owner AND NOT l.released AND l.expires_at > ${now}
                 THEN l.fence ELSE GREATEST(l.fence + 1, ${next}) END,
    owner = excluded.owner,
    expires_at = ${now} + ${ttl} * interval '1 millisecond',
    released = false,
    holder = excluded.holder
  WHERE l.released OR l.expires_at <= ${now} OR l.owner = excluded.owner
  RETURNING l.fence, l.expires_at
)
SELECT true AS granted, fence::text AS fence, ${ttl}::pg_catalog.numeric AS ms, NULL::text AS owner, false AS released, NULL::text AS holder FROM granted
UNION ALL
SELECT false, fence::text, ${REMAINING}, owner, released, holder FROM ${table}
  WHERE name = ${key} AND NOT EXISTS (SELECT 1 FROM granted);
UPDATE ${table} SET fence = ${next} WHERE name = ${key} AND owner = ${owner} AND fence = 0
  RETURNING fence::text AS fence`
    },
    /** Extend: our lease restarted from the server's now; no row when not ours. */
    extend: (key: string, owner: string, fence: bigint, ttlMs: number) =>
      `UPDATE ${table} SET expires_at = ${now} + ${floatLiteral(ttlMs)} * interval '1 millisecond'
  WHERE name = ${textLiteral(key)} AND owner = ${textLiteral(owner)} AND fence = ${bigintLiteral(fence)} AND NOT released
  RETURNING ${REMAINING} AS ms`,
    /**
     * Release (any fence when `fence` is undefined): marks the row released (fence kept) and notifies the
     * key on `channel` in the SAME statement: the notification is sent at commit, and only if the release
     * committed, so a waiter never hears of a release that did not happen, nor misses one that did (a
     * trigger would do the same at the cost of one more object in the user's schema and a call on every
     * grant and renewal). One row per row released.
     */
    release: (key: string, owner: string, fence: bigint | undefined, channel: string) => `WITH released AS (
  UPDATE ${table} SET released = true, expires_at = 'epoch'
  WHERE name = ${textLiteral(key)} AND owner = ${textLiteral(owner)}${fence === undefined ? '' : ` AND fence = ${bigintLiteral(fence)}`} AND NOT released
  RETURNING name
)
SELECT pg_catalog.pg_notify(${textLiteral(channel)}, name) FROM released`,
    read: (key: string) =>
      `SELECT owner, fence::text AS fence, ${REMAINING} AS ms, released, holder FROM ${table} WHERE name = ${textLiteral(key)}`,
  }
}
