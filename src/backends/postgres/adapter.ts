/**
 * The PostgreSQL adapter of the sql-lease engine: each primitive ONE statement on the lock table (the SQL
 * is statements.ts's), on the server's clock (`clock_timestamp()`: `now()` is frozen at the start of a
 * transaction, and a caller's transaction-pooling proxy may run our statement inside a longer one). Leases
 * are sent as milliseconds and returned as numeric milliseconds, fences as text (bigint, whatever the
 * client's type settings), never timestamps.
 *
 * Session settings: the statements need READ COMMITTED and a read-write transaction. The session
 * defaults are read with the table check (once per client): while they are those, each statement is a
 * prepared one; otherwise it goes out in ONE simple-protocol message behind `PIN`, which sets them for
 * its own implicit transaction only (nothing of the session changes, and a client paused mid-message holds
 * no row lock: the server runs nothing before the whole message is in), with literal values. A statement
 * that meets a session the defaults did not tell of (someone's SET on a pooled connection) fails without
 * applying anything (40001, 25006): it is sent again pinned, and the client pins from then on. Nothing
 * else of the session matters (statements.ts).
 */

import { raceSignal } from '../../core/abort.js'
import type { BackendLimits } from '../../core/backend.js'
import { type Primitive, quoteKey } from '../../core/errors.js'
import type {
  SqlAcquired,
  SqlAcquiredAll,
  SqlAcquireRequest,
  SqlAdapter,
  SqlListedRow,
  SqlListener,
  SqlRow,
} from '../../engines/sql/adapter.js'
import { HeldByAnother } from '../../engines/sql/held-by-another.js'
import type { PgSql } from './client.js'
import { pgDoctor, pgTableDoctor } from './doctor.js'
import { createRaced, droppedHandshake, tableNoun, tlsRefused, unavailable } from './faults.js'
import { channelOf, ddl, fenceSequence, type PgTable, qualified, sequenceDdl, tableDdl } from './layout.js'
import { listenProven } from './notify.js'
import { literals, PIN, parameters, statements, type Values } from './statements.js'
import { acceptsTls, tlsTarget } from './tls-probe.js'

/**
 * Keys: a btree index entry holds at most ~2.7 kB; 2048 bytes of text leaves room, and text cannot hold
 * NUL (the server refuses it as an invalid byte sequence). Leases: 2^43 ms.
 */
export const POSTGRES_LIMITS: BackendLimits = { maxKeyBytes: 2048, maxTtlMs: 2 ** 43, nulInKeys: false }

interface Options {
  readonly sql: PgSql
  readonly table: PgTable
  readonly id: string
  /** Whether `sql` is ours (made from a URL): `close` ends it. */
  readonly owned: boolean
  /**
   * Whether the engine may create what is missing. Off, a table without its fence sequence (made by an
   * earlier version) counts as there: the statements then fail naming the sequence, and doctor gives its DDL.
   */
  readonly createTable: boolean
  /**
   * `table` is an elections table (src/engines/sql-election.ts): its rows carry the leader's value, and
   * grants and proclaims are notified as releases are, for observers. @default false
   */
  readonly election?: boolean | undefined
}

type Row = {
  granted?: boolean
  fence: string
  /** numeric, as text */
  ms: string
  owner: string
  released: boolean
  holder: string | null
  /** An elections table's. */
  value?: string
}

/** The sql-lease engine's adapter for PostgreSQL (`postgresBackend` builds one) over your `postgres` instance. */
export class PostgresAdapter implements SqlAdapter {
  readonly id: string
  readonly limits = POSTGRES_LIMITS
  readonly table: string
  readonly #sql: PgSql
  readonly #t: PgTable
  readonly #sequence: string
  readonly #owned: boolean
  readonly #createTable: boolean
  readonly #election: boolean
  /** What this table's rows are leases of, for messages. */
  readonly #primitive: Primitive
  readonly #channel: string
  readonly #q: ReturnType<typeof statements>
  /** Named prepared statements unless the user's instance turned them off (`prepare: false`, for PgBouncer). */
  readonly #prepare: boolean
  /** Whether the session defaults seen last need `PIN` (until seen: yes). */
  #pinned = true
  /** A statement met a session the defaults did not tell of: `PIN` for good. */
  #pinnedForGood = false

  constructor(options: Options) {
    this.#sql = options.sql
    this.#t = options.table
    this.#owned = options.owned
    this.#createTable = options.createTable
    this.#election = options.election ?? false
    this.#primitive = this.#election ? 'election' : 'lock'
    this.id = options.id
    this.table = qualified(options.table)
    this.#sequence = qualified(fenceSequence(options.table))
    this.#channel = channelOf(options.table)
    this.#q = statements(options.table, this.#election)
    this.#prepare = options.sql.options?.prepare !== false
  }

  async acquire(req: SqlAcquireRequest, _signal: AbortSignal): Promise<SqlAcquired> {
    checkKey(req.key)
    // Not raced against the signal: the attempt settles when the statement has, so that the clean-up of
    // an acquire given up meanwhile (abandon) runs after it on the server, never before a grant it
    // must undo (the core stops waiting for the attempt at once anyway).
    const rows = await this.#run<Row>('acquire', req.key, (v) => this.#q.acquire(v, req), undefined)
    const row = rows[0]
    if (row?.granted) return { granted: true, fence: BigInt(row.fence), leaseMs: Number(row.ms) }
    return { granted: false, current: row === undefined ? undefined : toRow(row) }
  }

  /**
   * Every key's acquire statement in ONE transaction, READ COMMITTED and read-write whatever the session's
   * defaults (set by its BEGIN), in the order given: each statement keeps its key's row and advisory lock
   * to the end, so two sets lock their common keys in one order. The first key held by another rolls it
   * all back. A deadlock or serialization failure (keys whose advisory locks share a hash) rolled it back
   * too: a refusal, tried again.
   */
  async acquireAll(reqs: readonly SqlAcquireRequest[], _signal: AbortSignal): Promise<SqlAcquiredAll> {
    for (const req of reqs) checkKey(req.key)
    try {
      return await this.#sql.begin('isolation level read committed read write', async (sql) => {
        const grants: { fence: bigint; leaseMs: number }[] = []
        for (const req of reqs) {
          const values = parameters()
          const query = sql.unsafe(this.#q.acquire(values, req), values.params as never[], {
            prepare: this.#prepare,
          })
          const row = ranStatement<Row>(await query)[0]
          if (!row?.granted) throw new HeldByAnother(req.key, row && toRow(row).remainingMs)
          grants.push({ fence: BigInt(row.fence), leaseMs: Number(row.ms) })
        }
        return { granted: true as const, grants }
      })
    } catch (error) {
      if (error instanceof HeldByAnother)
        return { granted: false, key: error.key, remainingMs: error.remainingMs }
      const code = (error as { code?: unknown }).code
      if (code === '40001' || code === '40P01') return { granted: false }
      throw await this.#failure(error, 'acquire', reqs[0]?.key)
    }
  }

  async extend(key: string, owner: string, fence: bigint, ttlMs: number, signal: AbortSignal) {
    const rows = await this.#run<{ ms: string }>(
      'renew',
      key,
      (v) => this.#q.extend(v, key, owner, fence, ttlMs),
      signal,
    )
    return rows[0] === undefined ? undefined : Number(rows[0].ms)
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
      (v) => this.#q.release(v, key, owner, fence, this.#channel),
      signal,
    )
    return rows.length > 0
  }

  async read(key: string, signal: AbortSignal): Promise<SqlRow | undefined> {
    checkKey(key)
    const rows = await this.#run<Row>('read', key, (v) => this.#q.read(v, key), signal)
    return rows[0] === undefined ? undefined : toRow(rows[0])
  }

  async listHeld(
    prefix: string,
    after: string | undefined,
    limit: number,
    signal: AbortSignal,
  ): Promise<SqlListedRow[]> {
    const rows = await this.#run<Row & { name: string }>(
      `list the locks under ${quoteKey(prefix)}`,
      undefined,
      (v) => this.#q.list(v, prefix, after, limit),
      signal,
    )
    return rows.map((row) => ({ key: row.name, ...toRow(row) }))
  }

  async breakLease(key: string, owner: string, fence: bigint, signal: AbortSignal): Promise<boolean> {
    const rows = await this.#run(
      'break',
      key,
      (v) => this.#q.breakLease(v, key, owner, fence, this.#channel),
      signal,
    )
    return rows.length > 0
  }

  /** An elections table's proclaim (statements.ts); a lock table has no value to replace. */
  async proclaim(key: string, owner: string, fence: bigint, value: string, signal: AbortSignal) {
    if (!this.#election) throw new TypeError(`${this.table} is a lock table: it holds no election values`)
    const rows = await this.#run(
      'proclaim a value for',
      key,
      (v) => this.#q.proclaim(v, key, owner, fence, value),
      signal,
    )
    return rows.length > 0
  }

  async latestFence(signal: AbortSignal): Promise<bigint | undefined> {
    const rows = await this.#run<{ fence: string | null }>(
      'read the fence sequence',
      undefined,
      () => this.#q.latestFence(),
      signal,
    )
    const fence = rows[0]?.fence
    return fence === undefined || fence === null ? undefined : BigInt(fence)
  }

  async retire(endedMs: number, limit: number, signal: AbortSignal): Promise<number> {
    const rows = await this.#run<{ retired: number }>(
      'retire ended leases',
      undefined,
      (v) => this.#q.retire(v, endedMs, limit),
      signal,
    )
    return rows[0]?.retired ?? 0
  }

  /**
   * Whether the table and its fence sequence both exist (a table of an earlier version has no sequence:
   * the engine then creates it, unless createTable is off).
   */
  async tableExists(signal: AbortSignal): Promise<boolean> {
    const found = await this.#exists(signal)
    return found.table && (found.sequence || !this.#createTable)
  }

  /**
   * Creates what is missing: the table (IF NOT EXISTS), then the fence sequence with its first value (see
   * `sequenceDdl`). Two clients creating them at once: CREATE can still fail (faults.ts `createRaced`),
   * and it is there now if the other creation committed (the sequence was never set back: its value is
   * set only in the transaction that made it).
   */
  async createTable(signal: AbortSignal): Promise<void> {
    for (const [what, text] of [
      ['table', tableDdl(this.#t, this.#election)],
      ['sequence', sequenceDdl(this.#t)],
    ] as const) {
      if ((await this.#exists(signal))[what]) continue
      try {
        await raceSignal(this.#sql.unsafe(text), signal)
      } catch (error) {
        if (createRaced(error) && (await this.#exists(signal))[what]) continue
        const name =
          what === 'table'
            ? `the ${tableNoun(this.#primitive)} ${this.table}`
            : `the fence sequence ${this.#sequence}`
        throw await this.#failure(error, `create ${name}`, undefined)
      }
    }
  }

  ddl(): string {
    return ddl(this.#t, this.#election)
  }

  /** Subscribes to the table's channel, delivery proven (notify.ts). */
  listen(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener> {
    return listenProven(this.#sql, this.#channel, onKey, onGap, signal)
  }

  doctor(signal: AbortSignal) {
    return pgDoctor(this.#sql, this.#doctorStore, signal)
  }

  tableDoctor(signal: AbortSignal) {
    return pgTableDoctor(this.#sql, this.#doctorStore, signal)
  }

  get #doctorStore() {
    return { id: this.id, table: this.#t, createTable: this.#createTable, election: this.#election }
  }

  async close(): Promise<void> {
    if (this.#owned) await this.#sql.end({ timeout: 1 })
  }

  /** Whether the table and the sequence exist; and the session defaults, which decide `#pinned`. */
  async #exists(signal: AbortSignal): Promise<{ table: boolean; sequence: boolean }> {
    try {
      const found = (await raceSignal(
        this.#sql.unsafe(
          `SELECT pg_catalog.to_regclass($1::text) IS NOT NULL AS table,
            pg_catalog.to_regclass($2::text) IS NOT NULL AS sequence,
            pg_catalog.current_setting('default_transaction_isolation') = 'read committed'
              AND pg_catalog.current_setting('default_transaction_read_only') = 'off' AS plain`,
          [this.table, this.#sequence],
        ),
        signal,
      )) as unknown
      const rows = ranStatement<{ table: boolean; sequence: boolean; plain: boolean }>(found)
      this.#pinned = rows[0]?.plain !== true
      return { table: rows[0]?.table === true, sequence: rows[0]?.sequence === true }
    } catch (error) {
      if (signal.aborted && error === signal.reason) throw error
      throw await this.#failure(error, `check the ${tableNoun(this.#primitive)}`, undefined)
    }
  }

  /**
   * `error` in words (faults.ts); a dropped connection that required TLS is first asked about on a
   * connection of its own (tls-probe.ts): a server that refuses TLS is a permanent error, said at once.
   */
  async #failure(error: unknown, what: string, key: string | undefined) {
    const target = droppedHandshake(error) ? tlsTarget(this.#sql) : undefined
    if (target && (await acceptsTls(target.host, target.port)) === false) {
      return tlsRefused(error, what, key, this.id, this.#primitive)
    }
    return unavailable(error, what, key, this.id, this.#primitive)
  }

  /**
   * One statement, raced against `signal` when given (the server may still run it: the engine settles
   * that): prepared, with parameters, while the session's defaults are READ COMMITTED and read-write;
   * else, or once one of them turned out otherwise (a session changed by a SET: the server refused the
   * statement as a serialization failure or a write in a read-only transaction, applying nothing), in one
   * message behind `PIN` with literal values, from then on.
   */
  async #run<R>(
    what: string,
    key: string | undefined,
    build: (values: Values) => string,
    signal: AbortSignal | undefined,
  ): Promise<R[]> {
    try {
      if (!this.#pinned && !this.#pinnedForGood) {
        const values = parameters()
        const query = this.#sql.unsafe(build(values), values.params as never[], { prepare: this.#prepare })
        try {
          return ranStatement<R>(await (signal ? raceSignal(query, signal) : query))
        } catch (error) {
          const code = (error as { code?: unknown }).code
          if (code !== '40001' && code !== '25006') throw error
          this.#pinnedForGood = true
        }
      }
      const query = this.#sql.unsafe(`${PIN};\n${build(literals)}`).simple()
      const results = (await (signal ? raceSignal(query, signal) : query)) as unknown as unknown[]
      return ranStatement<R>(results[1])
    } catch (error) {
      if (signal?.aborted && error === signal.reason) throw error
      throw await this.#failure(error, what, key)
    }
  }
}

/**
 * The rows of a statement that ran, told by its command tag (`SELECT 1`, `INSERT 0 1`: postgres.js sets
 * `command` from CommandComplete). postgres.js settles a query on ReadyForQuery whatever came before it, and
 * on a COPY reply with a stream: a peer that is not PostgreSQL can "answer" with no rows and no tag. Read as
 * no row, an acquire would be a refusal; nothing ran, so it is an error (the caller's `unavailable`).
 */
function ranStatement<R>(result: unknown): R[] {
  if (Array.isArray(result) && typeof (result as { command?: unknown }).command === 'string') return result
  throw new Error(
    'the server answered without running the statement (no command tag): check that the URL points at ' +
      'PostgreSQL, or at a proxy that reaches it',
  )
}

function toRow(row: Row): SqlRow {
  return {
    owner: row.owner,
    fence: BigInt(row.fence),
    remainingMs: Number(row.ms),
    released: row.released,
    holder: row.holder ?? undefined,
    ...(row.value === undefined ? {} : { value: row.value }),
  }
}

/** Text columns cannot hold NUL: such a key is the caller's mistake, said before any statement. */
function checkKey(key: string): void {
  if (key.includes('\0')) {
    throw new TypeError(`Expected \`key\` without NUL characters on PostgreSQL, got ${JSON.stringify(key)}`)
  }
}
