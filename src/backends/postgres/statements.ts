/**
 * The PostgreSQL statements of the sql-lease engine, for one table, and the isolation pin. A statement's
 * values enter through `Values`: as parameters of a prepared statement (`parameters()`, the fast path for a
 * session whose defaults are READ COMMITTED and read-write), or as literals (`literals()`, sent in one
 * message behind `PIN` otherwise). Identifiers are quoted; functions are pg_catalog's, so no search_path
 * reaches them. adapter.ts picks the way and sends them.
 */
import type { SqlAcquireRequest } from '../../engines/sql/adapter.js'
import { advisoryClass, channelOf, fenceSequence, type PgTable, qualified } from './layout.js'
import { bigintLiteral, floatLiteral, regclassLiteral, textLiteral } from './literals.js'

/**
 * Sent first, in the same message, when the session's defaults are not READ COMMITTED and read-write.
 * READ COMMITTED: a statement that meets a row a concurrent one changed waits for it and re-checks the
 * committed row (the acquire then finds it held, or free); under REPEATABLE READ or SERIALIZABLE (a
 * `default_transaction_isolation` of the role, database or server) the same statement fails with SQLSTATE
 * 40001 instead, and SERIALIZABLE's predicate locks fail acquires of other keys on the same index page.
 * READ WRITE: `default_transaction_read_only` would refuse every write.
 */
export const PIN = 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED, READ WRITE'

/** How a statement's values are written into it. */
export interface Values {
  text(value: string | undefined): string
  float(value: number): string
  bigint(value: bigint): string
}

/** Values as parameters `$n` of a prepared statement (the text stays the same from call to call). */
export function parameters(): Values & { readonly params: unknown[] } {
  const params: unknown[] = []
  const param = (value: unknown, type: string) => {
    params.push(value)
    return `$${params.length}::pg_catalog.${type}`
  }
  return {
    params,
    text: (value) => param(value ?? null, 'text'),
    float: (value) => param(value, 'float8'),
    bigint: (value) => param(value.toString(), 'int8'),
  }
}

/** Values as literals that read the same under every session setting (literals.ts). */
export const literals: Values = {
  text: (value) => (value === undefined ? 'NULL::pg_catalog.text' : textLiteral(value)),
  float: floatLiteral,
  bigint: bigintLiteral,
}

/**
 * The lease left on the server's clock, in ms (a released row's 1970 `expires_at` makes it very negative).
 * Durations come back as numeric (text on the wire, exact): a float8 is printed with as few digits as
 * `extra_float_digits` asks, one at -15.
 */
const REMAINING = `(extract(epoch from (expires_at - pg_catalog.clock_timestamp())) * 1000)::pg_catalog.numeric`

/**
 * The statements of one table; of an elections table (`election`: src/engines/sql-election.ts), the
 * acquire also stores the candidate's value and notifies the grant, reads return the value, and `proclaim`
 * replaces it.
 */
export function statements(t: PgTable, election = false) {
  const table = qualified(t)
  const next = `pg_catalog.nextval(${regclassLiteral(qualified(fenceSequence(t)))})`
  const now = 'pg_catalog.clock_timestamp()'
  const lockClass = advisoryClass(t)
  return {
    /**
     * Acquire. The INSERT takes the row when there is none, when it is free on the server's clock or
     * released (a new grant), or when it is held by this same owner (an earlier attempt whose reply was
     * lost: the lease restarts, the fence stays). A new grant's fence is the next value of the table's
     * sequence, and never less than the row's fence + 1: the sequence outlives the row (a DELETE, a
     * TRUNCATE, the table dropped), the row outlives a sequence set back. ON CONFLICT locks the row, so two
     * acquires of a free row are serialised: the second one re-evaluates its WHERE on the first one's row
     * and finds it held. Granted, the lease is the ttl the statement added to `clock_timestamp()` (exactly;
     * it started after our send). Refused, the second branch reports the holder's row as of the
     * statement's snapshot (for pacing only; possibly a moment old).
     *
     * A new row's fence is drawn in VALUES, which are computed before ON CONFLICT looks for the row (and
     * looks again after waiting for a concurrent grant, whose row a DELETE may remove meanwhile): the
     * key's advisory lock, taken first and held to the commit, makes every acquire of the key draw after
     * the previous one committed, so a fence drawn there still follows every earlier grant.
     */
    acquire: (v: Values, req: SqlAcquireRequest) => {
      const ttl = v.float(req.ttlMs)
      const owner = v.text(req.owner)
      // An election's grant is news for its observers (sql-election.ts): notified at commit, as a release is.
      const value = election
        ? { column: ', value', given: `, ${v.text(req.value ?? '')}`, set: ',\n    value = excluded.value' }
        : { column: '', given: '', set: '' }
      const told = election
        ? `, told AS (SELECT pg_catalog.pg_notify(${v.text(channelOf(t))}, ${v.text(req.key)}) FROM granted)`
        : ''
      const drawn = `(SELECT CASE WHEN serialised.locked IS NOT NULL THEN ${next} END FROM (SELECT pg_catalog.pg_advisory_xact_lock(${lockClass}, pg_catalog.hashtext(${v.text(req.key)}))::text AS locked) AS serialised)`
      return `WITH granted AS (
  INSERT INTO ${table} AS l (name, owner, fence, expires_at, released, holder${value.column})
  VALUES (${v.text(req.key)}, ${owner}, ${drawn}, ${now} + ${ttl} * interval '1 millisecond', false, ${v.text(req.holder)}${value.given})
  ON CONFLICT (name) DO UPDATE SET
    fence = CASE WHEN l.owner = excluded.owner AND NOT l.released AND l.expires_at > ${now}
                 THEN l.fence ELSE GREATEST(l.fence + 1, ${next}) END,
    owner = excluded.owner,
    expires_at = ${now} + ${ttl} * interval '1 millisecond',
    released = false,
    holder = excluded.holder${value.set}
  WHERE l.released OR l.expires_at <= ${now} OR l.owner = excluded.owner
  RETURNING l.fence, l.expires_at
)${told}
SELECT true AS granted, fence::text AS fence, ${ttl}::pg_catalog.numeric AS ms, NULL::text AS owner, false AS released, NULL::text AS holder FROM granted${election ? ' CROSS JOIN told' : ''}
UNION ALL
SELECT false, fence::text, ${REMAINING}, owner, released, holder FROM ${table}
  WHERE name = ${v.text(req.key)} AND NOT EXISTS (SELECT 1 FROM granted)`
    },
    /** Extend: our lease restarted from the server's now; no row when not ours, or when it has ended (never revived). */
    extend: (v: Values, key: string, owner: string, fence: bigint, ttlMs: number) =>
      `UPDATE ${table} SET expires_at = ${now} + ${v.float(ttlMs)} * interval '1 millisecond'
  WHERE name = ${v.text(key)} AND owner = ${v.text(owner)} AND fence = ${v.bigint(fence)} AND NOT released
    AND expires_at > ${now}
  RETURNING ${REMAINING} AS ms`,
    /**
     * Release (any fence when `fence` is undefined): deletes the row, owner-checked (the name is retired:
     * its next grant draws a larger fence from the sequence), and notifies the key on `channel` in the SAME
     * statement: the notification is sent at commit, and only if the release committed, so a waiter never
     * hears of a release that did not happen, nor misses one that did (a trigger would do the same at the
     * cost of one more object in the user's schema and a call on every grant and renewal). One row per row
     * released. (`NOT released`: a row an earlier version marked released is nobody's to release.)
     */
    release: (v: Values, key: string, owner: string, fence: bigint | undefined, channel: string) => {
      const which = `name = ${v.text(key)} AND owner = ${v.text(owner)}`
      return `WITH released AS (
  DELETE FROM ${table}
  WHERE ${which}${fence === undefined ? '' : ` AND fence = ${v.bigint(fence)}`} AND NOT released
  RETURNING name
)
SELECT pg_catalog.pg_notify(${v.text(channel)}, name) FROM released`
    },
    /**
     * Break: the release statement (row deleted, the key notified in the same statement), conditioned on
     * the lease the engine read: its owner and fence, still held on the server's clock. A grant, renewal
     * or release since then leaves it matching nothing: no row.
     */
    breakLease: (v: Values, key: string, owner: string, fence: bigint, channel: string) =>
      `WITH broken AS (
  DELETE FROM ${table}
  WHERE name = ${v.text(key)} AND owner = ${v.text(owner)} AND fence = ${v.bigint(fence)} AND NOT released
    AND expires_at > ${now}
  RETURNING name
)
SELECT pg_catalog.pg_notify(${v.text(channel)}, name) FROM broken`,
    /**
     * List: one page of the rows held now whose name starts with `prefix`, after `after`, in byte order.
     * The comparisons use the "C" collation (UTF-8 byte order, code point order), whatever the column's:
     * under a linguistic collation a range of names is not a prefix ('a-b' sorts between 'a/a' and
     * 'a/c'), and keyset paging needs the order the range is cut in. `starts_with` decides the prefix
     * exactly (no LIKE wildcards to escape); the range beside it lets a "C" index serve the page (the
     * primary key's index does where the database's collation is C; elsewhere each page reads the table).
     */
    list: (v: Values, prefix: string, after: string | undefined, limit: number) =>
      `SELECT name, owner, fence::text AS fence, ${REMAINING} AS ms, released, holder FROM ${table}
  WHERE name COLLATE pg_catalog."C" >= ${v.text(prefix)} AND pg_catalog.starts_with(name COLLATE pg_catalog."C", ${v.text(prefix)})${
    after === undefined ? '' : `\n    AND name COLLATE pg_catalog."C" > ${v.text(after)}`
  }
    AND NOT released AND expires_at > ${now}
  ORDER BY name COLLATE pg_catalog."C" LIMIT ${integer(limit)}`,
    /**
     * Retire: deletes up to `limit` rows whose lease ended over `endedMs` ago (a crashed holder's, or one
     * an earlier version marked released: 1970), one row of count. Rows another statement holds locked
     * (being granted or renewed) are skipped, and the DELETE checks the end again on the row as it is, so
     * a row taken meanwhile stays. Fences need no margin (the sequence outlives the rows): `endedMs` only
     * spares a holder a moment late with its renewal. Reads the whole table when few rows qualify (no
     * index on `expires_at`, which would cost every renewal an index write): the engine runs it rarely.
     */
    retire: (v: Values, endedMs: number, limit: number) => {
      const ended = `expires_at < ${now} - ${v.float(endedMs)} * interval '1 millisecond'`
      return `WITH due AS (
  SELECT name FROM ${table} WHERE ${ended} LIMIT ${integer(limit)} FOR UPDATE SKIP LOCKED
), retired AS (
  DELETE FROM ${table} AS l USING due WHERE l.name = due.name AND l.${ended} RETURNING 1
)
SELECT pg_catalog.count(*)::int AS retired FROM retired`
    },
    /**
     * Proclaim (an elections table's): the leader's value replaced, only while the row is held by our owner
     * and fence on the server's clock, and the key notified in the same statement (for observers). One row
     * when it was.
     */
    proclaim: (v: Values, key: string, owner: string, fence: bigint, value: string) =>
      `WITH proclaimed AS (
  UPDATE ${table} SET value = ${v.text(value)}
  WHERE name = ${v.text(key)} AND owner = ${v.text(owner)} AND fence = ${v.bigint(fence)} AND NOT released
    AND expires_at > ${now}
  RETURNING name
)
SELECT pg_catalog.pg_notify(${v.text(channelOf(t))}, name) FROM proclaimed`,
    /** The sequence's last value (NULL before its first use): every fence granted is at most that. */
    latestFence: () =>
      `SELECT pg_catalog.pg_sequence_last_value(${regclassLiteral(qualified(fenceSequence(t)))})::text AS fence`,
    read: (v: Values, key: string) =>
      `SELECT owner, fence::text AS fence, ${REMAINING} AS ms, released, holder${election ? ', value' : ''} FROM ${table} WHERE name = ${v.text(key)}`,
  }
}

/** A count written into a statement (a LIMIT), checked first. */
function integer(value: number): string {
  if (!Number.isSafeInteger(value) || value < 1) throw new TypeError(`Expected an integer >= 1, got ${value}`)
  return String(value)
}
