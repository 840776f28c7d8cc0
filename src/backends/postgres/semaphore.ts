/**
 * The PostgreSQL adapter of the sql engine's semaphore (src/engines/sql/semaphore.ts decides): the SQL of
 * its transaction's steps over `<table>_semaphores` and `<table>_permits` (layout.ts), each transaction
 * opened READ COMMITTED, READ WRITE whatever the session's defaults. Sequences: the larger of the latest one
 * read under the semaphore's lock + 1 and the next value of `<table>_semaphores_fence` (a sequence made past
 * the server's clock in µs, not owned by the table, never rolled back): they never go back, also after an
 * idle semaphore's rows were deleted. Expiry on `clock_timestamp()`. Waiters: `pg_notify` on the semaphores
 * table's channel (sent at commit), the name as payload.
 */
import { raceSignal } from '../../core/abort.js'
import type { SqlListener } from '../../engines/sql/adapter.js'
import type {
  SqlPermitRow,
  SqlPermitWrite,
  SqlSemaphoreAdapter,
  SqlSemaphoreTx,
} from '../../engines/sql/semaphore-adapter.js'
import { POSTGRES_LIMITS } from './adapter.js'
import type { PgSql } from './client.js'
import { createRaced, unavailable } from './faults.js'
import {
  channelOf,
  fenceSequence,
  type PgTable,
  permitsTable,
  qualified,
  semaphoreDdl,
  semaphoresTable,
  semaphoreTablesDdl,
  sequenceDdl,
} from './layout.js'
import { regclassLiteral } from './literals.js'
import { listenProven } from './notify.js'

interface Options {
  readonly sql: PgSql
  /** The lock table: the semaphore tables are named after it. */
  readonly table: PgTable
  readonly id: string
}

type Run = (text: string, params: readonly unknown[]) => Promise<Record<string, unknown>[]>

const NOW = 'pg_catalog.clock_timestamp()'
const REMAINING = `(extract(epoch from (expires_at - ${NOW})) * 1000)::pg_catalog.numeric::pg_catalog.text`

export class PostgresSemaphoreAdapter implements SqlSemaphoreAdapter {
  readonly id: string
  readonly limits = POSTGRES_LIMITS
  readonly table: string
  readonly #sql: PgSql
  readonly #t: PgTable
  readonly #sems: string
  readonly #permits: string
  readonly #sequence: string
  readonly #next: string
  readonly #channel: string
  readonly #prepare: boolean

  constructor(options: Options) {
    this.#sql = options.sql
    this.#t = options.table
    this.id = options.id
    this.#sems = qualified(semaphoresTable(options.table))
    this.#permits = qualified(permitsTable(options.table))
    this.table = `${this.#sems} and ${this.#permits}`
    this.#sequence = qualified(fenceSequence(semaphoresTable(options.table)))
    this.#next = `pg_catalog.nextval(${regclassLiteral(this.#sequence)})`
    this.#channel = channelOf(semaphoresTable(options.table))
    this.#prepare = options.sql.options?.prepare !== false
  }

  async transaction<T>(
    what: string,
    key: string | undefined,
    body: (tx: SqlSemaphoreTx) => Promise<T>,
  ): Promise<T> {
    if (key?.includes('\0')) {
      throw new TypeError(`Expected \`key\` without NUL characters on PostgreSQL, got ${JSON.stringify(key)}`)
    }
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
      throw unavailable(error, what, key, this.id)
    }
  }

  #tx(run: Run): SqlSemaphoreTx {
    const S = this.#sems
    const P = this.#permits
    const semRow = (rows: Record<string, unknown>[]) => {
      const row = rows[0]
      return row === undefined ? undefined : { limit: Number(row.lim), latest: BigInt(row.latest as string) }
    }
    const write = (w: SqlPermitWrite) => [
      w.key,
      w.owner,
      w.permits,
      w.ms,
      w.holder ?? null,
      w.after.toString(),
    ]
    return {
      lock: async (key, limit) =>
        semRow(
          limit === undefined
            ? await run(
                `SELECT permit_limit AS lim, last_sequence::text AS latest FROM ${S} WHERE name = $1::text FOR UPDATE`,
                [key],
              )
            : await run(
                `INSERT INTO ${S} AS s (name, permit_limit, last_sequence) VALUES ($1::text, $2::int4, 0)
                 ON CONFLICT (name) DO UPDATE SET permit_limit = s.permit_limit
                 RETURNING permit_limit AS lim, last_sequence::text AS latest`,
                [key, limit],
              ),
        ),
      peek: async (key) =>
        semRow(
          await run(
            `SELECT permit_limit AS lim, last_sequence::text AS latest FROM ${S} WHERE name = $1::text`,
            [key],
          ),
        ),
      purge: async (key) => {
        await run(`DELETE FROM ${P} WHERE name = $1::text AND expires_at <= ${NOW}`, [key])
      },
      rows: async (key, lock) =>
        (
          await run(
            `SELECT owner, permits, granted, sequence::text AS sequence, ${REMAINING} AS ms, holder
             FROM ${P} WHERE name = $1::text${lock ? ' FOR UPDATE' : ''}`,
            [key],
          )
        ).map(toPermit),
      grant: async (w) => {
        const rows = await run(
          `WITH s AS (
             UPDATE ${S} SET last_sequence = GREATEST($6::int8 + 1, ${this.#next})
             WHERE name = $1::text RETURNING last_sequence
           )
           INSERT INTO ${P} AS p (name, owner, permits, granted, sequence, expires_at, holder)
           SELECT $1::text, $2::text, $3::int4, true, s.last_sequence,
             ${NOW} + $4::float8 * interval '1 millisecond', $5::text FROM s
           ON CONFLICT (name, owner) DO UPDATE SET permits = excluded.permits, granted = true,
             sequence = excluded.sequence, expires_at = excluded.expires_at, holder = excluded.holder
           RETURNING p.sequence::text AS sequence`,
          write(w),
        )
        const sequence = rows[0]?.sequence
        if (typeof sequence !== 'string')
          throw new Error(`the semaphore row of ${JSON.stringify(w.key)} vanished`)
        return BigInt(sequence)
      },
      queue: async (w) => {
        await run(
          `INSERT INTO ${P} AS p (name, owner, permits, granted, sequence, expires_at, holder)
           VALUES ($1::text, $2::text, $3::int4, false, GREATEST($6::int8 + 1, ${this.#next}),
             ${NOW} + $4::float8 * interval '1 millisecond', $5::text)
           ON CONFLICT (name, owner) DO UPDATE SET permits = excluded.permits, expires_at = excluded.expires_at`,
          write(w),
        )
      },
      remove: async (key, owner, sequence) =>
        (sequence === undefined
          ? await run(`DELETE FROM ${P} WHERE name = $1::text AND owner = $2::text RETURNING 1`, [key, owner])
          : await run(
              `DELETE FROM ${P} WHERE name = $1::text AND owner = $2::text AND granted AND sequence = $3::int8
               RETURNING 1`,
              [key, owner, sequence.toString()],
            )
        ).length > 0,
      forgetIfIdle: async (key) => {
        await run(
          `DELETE FROM ${S} WHERE name = $1::text AND NOT EXISTS (SELECT 1 FROM ${P} WHERE name = $1::text)`,
          [key],
        )
      },
      setLimit: async (key, limit) => {
        await run(
          `INSERT INTO ${S} AS s (name, permit_limit, last_sequence) VALUES ($1::text, $2::int4, 0)
           ON CONFLICT (name) DO UPDATE SET permit_limit = excluded.permit_limit`,
          [key, limit],
        )
      },
      notify: async (key) => {
        await run('SELECT pg_catalog.pg_notify($1::text, $2::text)', [this.#channel, key])
      },
      idle: async (limit) =>
        (
          await run(
            `SELECT name FROM ${S} s WHERE NOT EXISTS (
               SELECT 1 FROM ${P} p WHERE p.name = s.name AND p.expires_at > ${NOW})
             LIMIT $1::int4 FOR UPDATE SKIP LOCKED`,
            [limit],
          )
        ).map((row) => String(row.name)),
    }
  }

  async extend(key: string, owner: string, sequence: bigint, ttlMs: number, signal: AbortSignal) {
    try {
      const rows = (await raceSignal(
        this.#sql.unsafe(
          `UPDATE ${this.#permits} SET expires_at = ${NOW} + $4::float8 * interval '1 millisecond'
           WHERE name = $1::text AND owner = $2::text AND granted AND sequence = $3::int8
             AND expires_at > ${NOW} RETURNING 1`,
          [key, owner, sequence.toString(), ttlMs] as never[],
          { prepare: this.#prepare },
        ),
        signal,
      )) as unknown as unknown[]
      return rows.length > 0 ? ttlMs : undefined
    } catch (error) {
      if (signal.aborted && error === signal.reason) throw error
      throw unavailable(error, 'renew permits of', key, this.id)
    }
  }

  async latestSequence(signal: AbortSignal): Promise<bigint | undefined> {
    try {
      const rows = (await raceSignal(
        this.#sql.unsafe(`SELECT last_value::text AS v, is_called FROM ${this.#sequence}`),
        signal,
      )) as unknown as { v: string; is_called: boolean }[]
      const row = rows[0]
      return row?.is_called ? BigInt(row.v) : undefined
    } catch (error) {
      if (signal.aborted && error === signal.reason) throw error
      throw unavailable(error, 'read the semaphore sequence', undefined, this.id)
    }
  }

  async tableExists(signal: AbortSignal): Promise<boolean> {
    const found = await this.#exists(signal)
    return found.semaphores && found.permits && found.sequence
  }

  /** Creates what is missing (see `PostgresAdapter.createTable`: the same races are tolerated). */
  async createTable(signal: AbortSignal): Promise<void> {
    const steps = [
      ['permits', semaphoreTablesDdl(this.#t)],
      ['sequence', sequenceDdl(semaphoresTable(this.#t), 'last_sequence')],
    ] as const
    for (const [what, text] of steps) {
      const found = await this.#exists(signal)
      if (what === 'permits' ? found.semaphores && found.permits : found.sequence) continue
      try {
        await raceSignal(this.#sql.unsafe(text), signal)
      } catch (error) {
        if (createRaced(error) && (await this.#exists(signal))[what]) continue
        throw unavailable(error, `create the semaphore tables ${this.table}`, undefined, this.id)
      }
    }
  }

  ddl(): string {
    return semaphoreDdl(this.#t)
  }

  /** Subscribes to the semaphores table's channel, delivery proven (notify.ts). */
  listen(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener> {
    return listenProven(this.#sql, this.#channel, onKey, onGap, signal)
  }

  /** The client is the lock table adapter's: it ends it. */
  async close(): Promise<void> {}

  async #exists(signal: AbortSignal): Promise<{ semaphores: boolean; permits: boolean; sequence: boolean }> {
    try {
      const rows = (await raceSignal(
        this.#sql.unsafe(
          `SELECT pg_catalog.to_regclass($1::text) IS NOT NULL AS semaphores,
            pg_catalog.to_regclass($2::text) IS NOT NULL AS permits,
            pg_catalog.to_regclass($3::text) IS NOT NULL AS sequence`,
          [this.#sems, this.#permits, this.#sequence],
        ),
        signal,
      )) as unknown as { semaphores: boolean; permits: boolean; sequence: boolean }[]
      const row = rows[0]
      return {
        semaphores: row?.semaphores === true,
        permits: row?.permits === true,
        sequence: row?.sequence === true,
      }
    } catch (error) {
      if (signal.aborted && error === signal.reason) throw error
      throw unavailable(error, `check the semaphore tables ${this.table}`, undefined, this.id)
    }
  }
}

function toPermit(row: Record<string, unknown>): SqlPermitRow {
  return {
    owner: String(row.owner),
    permits: Number(row.permits),
    granted: row.granted === true,
    sequence: BigInt(row.sequence as string),
    remainingMs: Number(row.ms),
    ...(row.holder === null || row.holder === undefined ? {} : { holder: String(row.holder) }),
  }
}
