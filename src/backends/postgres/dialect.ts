/**
 * The PostgreSQL dialect of the sql-lease engine: each primitive ONE statement on the lock table, on the
 * server's clock (`clock_timestamp()`: `now()` is frozen at the start of a transaction, and a caller's
 * transaction-pooling proxy may run our statement inside a longer one). Leases are sent and returned as
 * milliseconds (float8), fences as text (bigint, whatever the client's type settings), never timestamps.
 */

import { raceSignal } from '../../core/abort.js'
import type { BackendLimits } from '../../core/backend.js'
import type {
  SqlAcquired,
  SqlAcquireRequest,
  SqlDialect,
  SqlListener,
  SqlRow,
} from '../../engines/sql-lease-driver.js'
import { pgDoctor } from './doctor.js'
import { unavailable } from './faults.js'
import { channelOf, ddl, type PgTable, qualified } from './layout.js'
import type { PgSql } from './sql.js'

/** Keys: a btree index entry holds at most ~2.7 kB; 2048 bytes of text leaves room. Leases: 2^43 ms. */
export const POSTGRES_LIMITS: BackendLimits = { maxKeyBytes: 2048, maxTtlMs: 2 ** 43 }

/** The lease left on the server's clock, in ms (a released row's 1970 `expires_at` makes it very negative). */
const REMAINING = `(extract(epoch from (expires_at - clock_timestamp())) * 1000)::float8`

/** The statements of one table, built once: only identifiers are spliced in (quoted), never values. */
function statements(t: PgTable) {
  const table = qualified(t)
  return {
    /**
     * Acquire ($1 key, $2 owner, $3 ttl ms, $4 holder). The INSERT takes the row when there is none
     * (fence 1), when it is free on the server's clock or released (fence + 1: a new grant), or when it
     * is held by this same owner (an earlier attempt whose reply was lost: the lease restarts, the fence
     * stays). ON CONFLICT locks the row, so two acquires of a free row are serialised: the second one
     * re-evaluates its WHERE on the first one's row and finds it held. Granted, the lease is the ttl the
     * statement added to `clock_timestamp()` (exactly; it started after our send). Refused, the second
     * branch reports the holder's row as of the statement's snapshot (for pacing only; possibly a moment old).
     */
    acquire: `WITH granted AS (
  INSERT INTO ${table} AS l (name, owner, fence, expires_at, released, holder)
  VALUES ($1::text, $2::text, 1, clock_timestamp() + $3::float8 * interval '1 millisecond', false, $4::text)
  ON CONFLICT (name) DO UPDATE SET
    fence = CASE WHEN l.owner = excluded.owner AND NOT l.released AND l.expires_at > clock_timestamp()
                 THEN l.fence ELSE l.fence + 1 END,
    owner = excluded.owner,
    expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond',
    released = false,
    holder = excluded.holder
  WHERE l.released OR l.expires_at <= clock_timestamp() OR l.owner = excluded.owner
  RETURNING l.fence, l.expires_at
)
SELECT true AS granted, fence::text AS fence, $3::float8 AS ms, NULL::text AS owner, false AS released, NULL::text AS holder FROM granted
UNION ALL
SELECT false, fence::text, ${REMAINING}, owner, released, holder FROM ${table}
  WHERE name = $1::text AND NOT EXISTS (SELECT 1 FROM granted)`,
    /** Extend ($1 key, $2 owner, $3 fence, $4 ttl ms): our lease restarted from the server's now; no row when not ours. */
    extend: `UPDATE ${table} SET expires_at = clock_timestamp() + $4::float8 * interval '1 millisecond'
  WHERE name = $1::text AND owner = $2::text AND fence = $3::bigint AND NOT released
  RETURNING ${REMAINING} AS ms`,
    /**
     * Release ($1 key, $2 owner, $3 fence or NULL for any, $4 channel): marks the row released (fence
     * kept) and notifies the key in the SAME statement: the notification is sent at commit, and only if
     * the release committed, so a waiter never hears of a release that did not happen, nor misses one
     * that did (a trigger would do the same at the cost of one more object in the user's schema and a
     * call on every grant and renewal). One row per row released.
     */
    release: `WITH released AS (
  UPDATE ${table} SET released = true, expires_at = 'epoch'
  WHERE name = $1::text AND owner = $2::text AND ($3::bigint IS NULL OR fence = $3::bigint) AND NOT released
  RETURNING name
)
SELECT pg_notify($4::text, name) FROM released`,
    read: `SELECT owner, fence::text AS fence, ${REMAINING} AS ms, released, holder FROM ${table} WHERE name = $1::text`,
  }
}

interface Options {
  readonly sql: PgSql
  readonly table: PgTable
  readonly id: string
  /** Whether `sql` is ours (made from a URL): `close` ends it. */
  readonly owned: boolean
}

type Row = {
  granted?: boolean
  fence: string
  ms: number
  owner: string
  released: boolean
  holder: string | null
}

export class PostgresDialect implements SqlDialect {
  readonly id: string
  readonly limits = POSTGRES_LIMITS
  readonly table: string
  readonly #sql: PgSql
  readonly #t: PgTable
  readonly #owned: boolean
  readonly #channel: string
  readonly #q: ReturnType<typeof statements>
  /** Named prepared statements unless the user's instance turned them off (`prepare: false`, for PgBouncer). */
  readonly #prepare: boolean

  constructor(options: Options) {
    this.#sql = options.sql
    this.#t = options.table
    this.#owned = options.owned
    this.id = options.id
    this.table = qualified(options.table)
    this.#channel = channelOf(options.table)
    this.#q = statements(options.table)
    this.#prepare = options.sql.options?.prepare !== false
  }

  async acquire(req: SqlAcquireRequest, _signal: AbortSignal): Promise<SqlAcquired> {
    checkKey(req.key)
    // Not raced against the signal: the attempt settles when the statement has, so that the clean-up of
    // an acquire given up meanwhile (abandon) runs after it on the server, never before a grant it
    // must undo (the core stops waiting for the attempt at once anyway).
    const rows = await this.#run<Row>(
      'acquire',
      req.key,
      this.#q.acquire,
      [req.key, req.owner, req.ttlMs, req.holder ?? null],
      undefined,
    )
    const row = rows[0]
    if (row?.granted) return { granted: true, fence: BigInt(row.fence), leaseMs: row.ms }
    return { granted: false, current: row === undefined ? undefined : toRow(row) }
  }

  async extend(key: string, owner: string, fence: bigint, ttlMs: number, signal: AbortSignal) {
    const rows = await this.#run<{ ms: number }>(
      'renew',
      key,
      this.#q.extend,
      [key, owner, fence.toString(), ttlMs],
      signal,
    )
    return rows[0]?.ms
  }

  async release(
    key: string,
    owner: string,
    fence: bigint | undefined,
    signal: AbortSignal,
  ): Promise<boolean> {
    const rows = await this.#run(
      'release',
      key,
      this.#q.release,
      [key, owner, fence === undefined ? null : fence.toString(), this.#channel],
      signal,
    )
    return rows.length > 0
  }

  async read(key: string, signal: AbortSignal): Promise<SqlRow | undefined> {
    checkKey(key)
    const rows = await this.#run<Row>('read', key, this.#q.read, [key], signal)
    return rows[0] === undefined ? undefined : toRow(rows[0])
  }

  async tableExists(signal: AbortSignal): Promise<boolean> {
    const rows = await this.#run<{ found: boolean }>(
      'check the lock table of',
      undefined,
      'SELECT to_regclass($1::text) IS NOT NULL AS found',
      [this.table],
      signal,
    )
    return rows[0]?.found === true
  }

  async createTable(signal: AbortSignal): Promise<void> {
    try {
      await raceSignal(this.#sql.unsafe(ddl(this.#t)), signal)
    } catch (error) {
      // Two clients creating it at once: CREATE TABLE IF NOT EXISTS can still fail on the catalog's
      // unique index (23505), on the table's row type created a moment before by the other (42710,
      // "type … already exists": seen in CI, 50 contenders on 5 clients of a fresh database), or report
      // it exists (42P07). Whichever, the table is there now if the other creation committed.
      const code = (error as { code?: unknown }).code
      if ((code === '23505' || code === '42710' || code === '42P07') && (await this.tableExists(signal)))
        return
      throw unavailable(error, `create the lock table ${this.table} on`, undefined, this.id)
    }
  }

  ddl(): string {
    return `${ddl(this.#t)};`
  }

  /**
   * Subscribes to the table's channel on postgres.js's dedicated listening connection (one per client;
   * it re-subscribes by itself after a reconnect, which `onGap` reports), then proves delivery: an empty
   * notification (no lock key is empty) sent through the pool must come back on it.
   */
  async listen(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener> {
    let proven!: () => void
    const proof = new Promise<void>((resolve) => {
      proven = resolve
    })
    const meta = await raceSignal(
      this.#sql.listen(this.#channel, (payload) => (payload === '' ? proven() : onKey(payload)), onGap),
      signal,
    )
    const listener: SqlListener = { close: () => meta.unlisten() }
    try {
      await raceSignal(this.#sql.unsafe('SELECT pg_notify($1::text, $2::text)', [this.#channel, '']), signal)
      await raceSignal(proof, signal)
    } catch (error) {
      await listener.close().catch(() => {})
      throw error
    }
    return listener
  }

  doctor(signal: AbortSignal) {
    return pgDoctor(this.#sql, this.id, signal)
  }

  async close(): Promise<void> {
    if (this.#owned) await this.#sql.end({ timeout: 1 })
  }

  /** One statement, raced against `signal` when given (the server may still run it: the engine settles that). */
  async #run<R>(
    what: string,
    key: string | undefined,
    text: string,
    params: unknown[],
    signal: AbortSignal | undefined,
  ): Promise<R[]> {
    try {
      const query = this.#sql.unsafe(text, params as never[], { prepare: this.#prepare })
      return (await (signal ? raceSignal(query, signal) : query)) as unknown as R[]
    } catch (error) {
      if (signal?.aborted && error === signal.reason) throw error
      throw unavailable(error, what, key, this.id)
    }
  }
}

function toRow(row: Row): SqlRow {
  return {
    owner: row.owner,
    fence: BigInt(row.fence),
    remainingMs: row.ms,
    released: row.released,
    holder: row.holder ?? undefined,
  }
}

/** Text columns cannot hold NUL: such a key is the caller's mistake, said before any statement. */
function checkKey(key: string): void {
  if (key.includes('\0')) {
    throw new TypeError(`Expected \`key\` without NUL characters on PostgreSQL, got ${JSON.stringify(key)}`)
  }
}
