/**
 * The PostgreSQL adapter of the sql engine's read-write lock (src/engines/sql/rwlock.ts decides): the SQL of
 * its transaction's steps over `<table>_rwlocks` and `<table>_rwlock_entries` (layout.ts), each transaction
 * opened READ COMMITTED, READ WRITE whatever the session's defaults. Places and fences: the larger of the
 * largest one read under the lock's row + 1 and the next value of `<table>_rwlocks_fence` (a sequence made
 * past the server's clock in µs, not owned by the table, never rolled back): a name's fences never go back,
 * also after its rows were deleted. Expiry on `clock_timestamp()`. Waiters: `pg_notify` on the rwlocks
 * table's channel (sent at commit), the name as payload.
 */
import { raceSignal } from '../../core/abort.js'
import type { RwLockMode } from '../../core/backend.js'
import type { SqlListener } from '../../engines/sql/adapter.js'
import type { SqlRwEntry, SqlRwLockAdapter, SqlRwLockTx } from '../../engines/sql/rwlock-adapter.js'
import { POSTGRES_LIMITS } from './adapter.js'
import type { PgSql } from './client.js'
import { createRaced, unavailable } from './faults.js'
import {
  channelOf,
  fenceSequence,
  type PgTable,
  qualified,
  rwEntriesTable,
  rwlockDdl,
  rwlocksTable,
  rwlockTablesDdl,
  sequenceDdl,
} from './layout.js'
import { regclassLiteral } from './literals.js'
import { listenProven } from './notify.js'

interface Options {
  readonly sql: PgSql
  /** The lock table: the read-write lock tables are named after it. */
  readonly table: PgTable
  readonly id: string
}

type Run = (text: string, params: readonly unknown[]) => Promise<Record<string, unknown>[]>

const NOW = 'pg_catalog.clock_timestamp()'
const REMAINING = `(extract(epoch from (expires_at - ${NOW})) * 1000)::pg_catalog.numeric::pg_catalog.text`
const ROW = 'last_fence::text AS latest, epoch::text AS epoch'

export class PostgresRwLockAdapter implements SqlRwLockAdapter {
  readonly id: string
  readonly limits = POSTGRES_LIMITS
  readonly table: string
  readonly #sql: PgSql
  readonly #t: PgTable
  readonly #locks: string
  readonly #entries: string
  readonly #sequence: string
  readonly #next: string
  readonly #channel: string
  readonly #prepare: boolean

  constructor(options: Options) {
    this.#sql = options.sql
    this.#t = options.table
    this.id = options.id
    this.#locks = qualified(rwlocksTable(options.table))
    this.#entries = qualified(rwEntriesTable(options.table))
    this.table = `${this.#locks} and ${this.#entries}`
    this.#sequence = qualified(fenceSequence(rwlocksTable(options.table)))
    this.#next = `pg_catalog.nextval(${regclassLiteral(this.#sequence)})`
    this.#channel = channelOf(rwlocksTable(options.table))
    this.#prepare = options.sql.options?.prepare !== false
  }

  async transaction<T>(
    what: string,
    key: string | undefined,
    body: (tx: SqlRwLockTx) => Promise<T>,
  ): Promise<T> {
    checkKey(key)
    try {
      return (await this.#sql.begin('isolation level read committed read write', (sql) => {
        const run: Run = async (text, params) =>
          (await sql.unsafe(text, params as never[], { prepare: this.#prepare })) as unknown as Record<
            string,
            unknown
          >[]
        return body(this.#tx(run))
      })) as T
    } catch (error) {
      if (error instanceof TypeError) throw error
      throw unavailable(error, what, key, this.id, 'rwlock')
    }
  }

  #tx(run: Run): SqlRwLockTx {
    const L = this.#locks
    const E = this.#entries
    const lockRow = (rows: Record<string, unknown>[]) => {
      const row = rows[0]
      return row === undefined
        ? undefined
        : { latest: BigInt(row.latest as string), epoch: BigInt(row.epoch as string) }
    }
    return {
      lock: async (key, create) =>
        lockRow(
          create
            ? await run(
                `INSERT INTO ${L} AS l (name, last_fence, epoch) VALUES ($1::text, 0, 0)
                 ON CONFLICT (name) DO UPDATE SET last_fence = l.last_fence RETURNING ${ROW}`,
                [key],
              )
            : await run(`SELECT ${ROW} FROM ${L} WHERE name = $1::text FOR UPDATE`, [key]),
        ),
      peek: async (key) => lockRow(await run(`SELECT ${ROW} FROM ${L} WHERE name = $1::text`, [key])),
      purge: async (key) => {
        await run(`DELETE FROM ${E} WHERE name = $1::text AND expires_at <= ${NOW}`, [key])
      },
      entries: async (key, lock) =>
        (
          await run(
            `SELECT owner, mode, place::text AS place, fence::text AS fence, ${REMAINING} AS ms, holder
             FROM ${E} WHERE name = $1::text${lock ? ' FOR UPDATE' : ''}`,
            [key],
          )
        ).map(toEntry),
      next: async (after) => {
        const rows = await run(`SELECT GREATEST($1::int8 + 1, ${this.#next})::text AS v`, [after.toString()])
        return BigInt(rows[0]!.v as string)
      },
      record: async (key, row) => {
        await run(`UPDATE ${L} SET last_fence = $2::int8, epoch = $3::int8 WHERE name = $1::text`, [
          key,
          row.latest.toString(),
          row.epoch.toString(),
        ])
      },
      put: async (w) => {
        await run(
          `INSERT INTO ${E} AS e (name, owner, mode, place, fence, expires_at, holder)
           VALUES ($1::text, $2::text, $3::text, $4::int8, $5::int8,
             ${NOW} + $6::float8 * interval '1 millisecond', $7::text)
           ON CONFLICT (name, owner) DO UPDATE SET mode = excluded.mode, place = excluded.place,
             fence = excluded.fence, expires_at = excluded.expires_at, holder = excluded.holder`,
          [w.key, w.owner, w.mode, w.place.toString(), w.fence?.toString() ?? null, w.ms, w.holder ?? null],
        )
      },
      remove: async (key, owner, fence) =>
        (fence === undefined
          ? await run(`DELETE FROM ${E} WHERE name = $1::text AND owner = $2::text RETURNING 1`, [key, owner])
          : await run(
              `DELETE FROM ${E} WHERE name = $1::text AND owner = $2::text AND fence = $3::int8 RETURNING 1`,
              [key, owner, fence.toString()],
            )
        ).length > 0,
      forgetIfIdle: async (key) => {
        await run(
          `DELETE FROM ${L} WHERE name = $1::text AND NOT EXISTS (SELECT 1 FROM ${E} WHERE name = $1::text)`,
          [key],
        )
      },
      notify: async (key) => {
        await run('SELECT pg_catalog.pg_notify($1::text, $2::text)', [this.#channel, key])
      },
      idle: async (limit) =>
        (
          await run(
            `SELECT name FROM ${L} l WHERE NOT EXISTS (
               SELECT 1 FROM ${E} e WHERE e.name = l.name AND e.expires_at > ${NOW})
             LIMIT $1::int4 FOR UPDATE SKIP LOCKED`,
            [limit],
          )
        ).map((row) => String(row.name)),
    }
  }

  extend(key: string, owner: string, fence: bigint, ttlMs: number, signal: AbortSignal) {
    return this.#one(
      'renew',
      key,
      `UPDATE ${this.#entries} SET expires_at = ${NOW} + $4::float8 * interval '1 millisecond'
       WHERE name = $1::text AND owner = $2::text AND fence = $3::int8 AND expires_at > ${NOW} RETURNING 1`,
      [key, owner, fence.toString(), ttlMs],
      signal,
    )
  }

  /** The entry made a reader and the waiters woken, in one statement (the notification sent at commit). */
  downgrade(key: string, owner: string, fence: bigint, signal: AbortSignal) {
    return this.#one(
      'downgrade',
      key,
      `WITH d AS (
         UPDATE ${this.#entries} SET mode = 'read'
         WHERE name = $1::text AND owner = $2::text AND fence = $3::int8 RETURNING 1
       )
       SELECT pg_catalog.pg_notify($4::text, $1::text) FROM d`,
      [key, owner, fence.toString(), this.#channel],
      signal,
    )
  }

  async latestFence(signal: AbortSignal): Promise<bigint | undefined> {
    try {
      const rows = (await raceSignal(
        this.#sql.unsafe(`SELECT last_value::text AS v, is_called FROM ${this.#sequence}`),
        signal,
      )) as unknown as { v: string; is_called: boolean }[]
      const row = rows[0]
      return row?.is_called ? BigInt(row.v) : undefined
    } catch (error) {
      if (signal.aborted && error === signal.reason) throw error
      throw unavailable(error, 'read the read-write lock sequence', undefined, this.id)
    }
  }

  async tableExists(signal: AbortSignal): Promise<boolean> {
    const found = await this.#exists(signal)
    return found.locks && found.entries && found.sequence
  }

  /** Creates what is missing (see `PostgresAdapter.createTable`: the same races are tolerated). */
  async createTable(signal: AbortSignal): Promise<void> {
    const steps = [
      ['entries', rwlockTablesDdl(this.#t)],
      ['sequence', sequenceDdl(rwlocksTable(this.#t), 'last_fence')],
    ] as const
    for (const [what, text] of steps) {
      const found = await this.#exists(signal)
      if (what === 'entries' ? found.locks && found.entries : found.sequence) continue
      try {
        await raceSignal(this.#sql.unsafe(text), signal)
      } catch (error) {
        if (createRaced(error) && (await this.#exists(signal))[what]) continue
        throw unavailable(error, `create the read-write lock tables ${this.table}`, undefined, this.id)
      }
    }
  }

  ddl(): string {
    return rwlockDdl(this.#t)
  }

  /** Subscribes to the rwlocks table's channel, delivery proven (notify.ts). */
  listen(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener> {
    return listenProven(this.#sql, this.#channel, onKey, onGap, signal)
  }

  /** The client is the lock table adapter's: it ends it. */
  async close(): Promise<void> {}

  /** ONE statement outside a transaction: true when it returned a row. */
  async #one(
    what: string,
    key: string,
    text: string,
    params: readonly unknown[],
    signal: AbortSignal,
  ): Promise<boolean> {
    checkKey(key)
    try {
      const rows = (await raceSignal(
        this.#sql.unsafe(text, params as never[], { prepare: this.#prepare }),
        signal,
      )) as unknown as unknown[]
      return rows.length > 0
    } catch (error) {
      if (signal.aborted && error === signal.reason) throw error
      throw unavailable(error, what, key, this.id, 'rwlock')
    }
  }

  async #exists(signal: AbortSignal): Promise<{ locks: boolean; entries: boolean; sequence: boolean }> {
    try {
      const rows = (await raceSignal(
        this.#sql.unsafe(
          `SELECT pg_catalog.to_regclass($1::text) IS NOT NULL AS locks,
            pg_catalog.to_regclass($2::text) IS NOT NULL AS entries,
            pg_catalog.to_regclass($3::text) IS NOT NULL AS sequence`,
          [this.#locks, this.#entries, this.#sequence],
        ),
        signal,
      )) as unknown as { locks: boolean; entries: boolean; sequence: boolean }[]
      const row = rows[0]
      return { locks: row?.locks === true, entries: row?.entries === true, sequence: row?.sequence === true }
    } catch (error) {
      if (signal.aborted && error === signal.reason) throw error
      throw unavailable(error, `check the read-write lock tables ${this.table}`, undefined, this.id)
    }
  }
}

function checkKey(key: string | undefined): void {
  if (key?.includes('\0')) {
    throw new TypeError(`Expected \`key\` without NUL characters on PostgreSQL, got ${JSON.stringify(key)}`)
  }
}

function toEntry(row: Record<string, unknown>): SqlRwEntry {
  return {
    owner: String(row.owner),
    mode: row.mode as RwLockMode,
    place: BigInt(row.place as string),
    fence: row.fence === null || row.fence === undefined ? undefined : BigInt(row.fence as string),
    remainingMs: Number(row.ms),
    ...(row.holder === null || row.holder === undefined ? {} : { holder: String(row.holder) }),
  }
}
