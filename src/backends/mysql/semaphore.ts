/**
 * The MySQL/MariaDB adapter of the sql engine's semaphore (src/engines/sql/semaphore.ts decides): the SQL of
 * its transaction's steps over `<table>_semaphores` and `<table>_permits` (layout.ts), each transaction on
 * one pool connection, READ COMMITTED, READ WRITE (set for that transaction only: nothing of the session
 * changes), its reads of permits locking. Times are µs since 1970 on the server's clock
 * (`UNIX_TIMESTAMP(SYSDATE(6))`: the same in every session's time zone). Sequences: the larger of the latest
 * one read under the semaphore's lock + 1 and the server's clock in µs + 1 s, as the lock's fences (see
 * `FENCE_EPOCH` in statements.ts): they never go back, also after an idle semaphore's rows were deleted,
 * unless the server's clock is set back. No notifications: waiters poll (the core's pace, at most once a
 * second and at the soonest lease end).
 */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise'
import { BackendUnavailableError, quoteKey } from '../../core/errors.js'
import type {
  SqlPermitRow,
  SqlPermitWrite,
  SqlSemaphoreAdapter,
  SqlSemaphoreTx,
} from '../../engines/sql/semaphore-adapter.js'
import { describeFailure } from './faults.js'
import { MAX_SEMAPHORE_KEY_BYTES, semaphoreTableNames, semaphoreTablesDdl } from './layout.js'
import { NOW_US, tableExistsSql } from './statements.js'
import { inTransaction, type Param, type Run } from './transaction.js'

interface Options {
  readonly pool: Pool
  /** The lock table's name as given (`db.locks` or `locks`): the semaphore tables are named after it. */
  readonly tableName: string
  readonly id: string
}

/** The sequence a grant or a place takes: above `after` (1 param) and the clock + 1 s. */
const NEXT = `GREATEST(CAST(? AS SIGNED) + 1, ${NOW_US} + 1000000)`
const REMAINING = `(expires_at - ${NOW_US}) / 1000`

export class MySqlSemaphoreAdapter implements SqlSemaphoreAdapter {
  readonly id: string
  readonly limits = { maxKeyBytes: MAX_SEMAPHORE_KEY_BYTES, maxTtlMs: 2 ** 31 - 1 }
  readonly table: string
  readonly #pool: Pool
  readonly #sems: string
  readonly #permits: string
  /** [database or null, table] of each, as information_schema spells them. */
  readonly #names: readonly (readonly [string | null, string])[]

  constructor(options: Options) {
    this.#pool = options.pool
    this.id = options.id
    const names = semaphoreTableNames(options.tableName)
    this.#sems = names.semaphores.quoted
    this.#permits = names.permits.quoted
    this.#names = [names.semaphores.parts, names.permits.parts]
    this.table = `${this.#sems} and ${this.#permits}`
  }

  async transaction<T>(
    what: string,
    key: string | undefined,
    body: (tx: SqlSemaphoreTx) => Promise<T>,
  ): Promise<T> {
    try {
      return await inTransaction(this.#pool, (run) => body(this.#tx(run)))
    } catch (error) {
      if (error instanceof TypeError) throw error
      throw this.#unavailable(error, what, key)
    }
  }

  /** A failed statement as the error the core expects: "Could not <what>[ semaphore <key>] on <store>: why". */
  #unavailable(error: unknown, what: string, key?: string): BackendUnavailableError {
    const { text, retryable } = describeFailure(error)
    return new BackendUnavailableError(
      `Could not ${what}${key === undefined ? '' : ` semaphore ${quoteKey(key)}`} on ${this.id}: ${text}`,
      { key, backend: this.id, cause: error, retryable },
    )
  }

  #tx(run: Run): SqlSemaphoreTx {
    const S = this.#sems
    const P = this.#permits
    const rowsOf = async (sql: string, params: Param[]) => (await run(sql, params)) as RowDataPacket[]
    const changed = async (sql: string, params: Param[]) =>
      ((await run(sql, params)) as ResultSetHeader).affectedRows
    const semRow = (rows: RowDataPacket[]) => {
      const row = rows[0]
      return row === undefined ? undefined : { limit: Number(row.lim), latest: BigInt(String(row.latest)) }
    }
    const SEM = 'SELECT permit_limit AS lim, CAST(last_sequence AS CHAR) AS latest FROM'
    const k = (key: string) => Buffer.from(key, 'utf8')
    return {
      lock: async (key, limit) => {
        if (limit !== undefined) {
          // A row there already is kept as it is (and locked by the SELECT below).
          await run(
            `INSERT INTO ${S} (sem_key, permit_limit, last_sequence) VALUES (?, ?, 0)
             ON DUPLICATE KEY UPDATE permit_limit = permit_limit`,
            [k(key), limit],
          )
        }
        return semRow(await rowsOf(`${SEM} ${S} WHERE sem_key = ? FOR UPDATE`, [k(key)]))
      },
      peek: async (key) => semRow(await rowsOf(`${SEM} ${S} WHERE sem_key = ?`, [k(key)])),
      purge: async (key) => {
        await run(`DELETE FROM ${P} WHERE sem_key = ? AND expires_at <= ${NOW_US}`, [k(key)])
      },
      rows: async (key, lock) =>
        (
          await rowsOf(
            `SELECT owner, permits, granted, CAST(sequence AS CHAR) AS sequence, ${REMAINING} AS ms, holder
             FROM ${P} WHERE sem_key = ?${lock ? ' FOR UPDATE' : ''}`,
            [k(key)],
          )
        ).map(toPermit),
      grant: async (w) => {
        await run(`UPDATE ${S} SET last_sequence = ${NEXT} WHERE sem_key = ?`, [w.after.toString(), k(w.key)])
        const sem = semRow(await rowsOf(`${SEM} ${S} WHERE sem_key = ?`, [k(w.key)]))
        if (sem === undefined) throw new Error(`the semaphore row of ${quoteKey(w.key)} vanished`)
        await run(
          `INSERT INTO ${P} (sem_key, owner, permits, granted, sequence, expires_at, holder)
           VALUES (?, ?, ?, 1, CAST(? AS SIGNED), ${NOW_US} + CAST(? AS SIGNED) * 1000, ?)
           ON DUPLICATE KEY UPDATE permits = VALUES(permits), granted = 1, sequence = VALUES(sequence),
             expires_at = VALUES(expires_at), holder = VALUES(holder)`,
          [k(w.key), w.owner, w.permits, sem.latest.toString(), Math.ceil(w.ms), w.holder ?? null],
        )
        return sem.latest
      },
      queue: async (w: SqlPermitWrite) => {
        await run(
          `INSERT INTO ${P} (sem_key, owner, permits, granted, sequence, expires_at, holder)
           VALUES (?, ?, ?, 0, ${NEXT}, ${NOW_US} + CAST(? AS SIGNED) * 1000, ?)
           ON DUPLICATE KEY UPDATE permits = VALUES(permits), expires_at = VALUES(expires_at)`,
          [k(w.key), w.owner, w.permits, w.after.toString(), Math.ceil(w.ms), w.holder ?? null],
        )
      },
      remove: async (key, owner, sequence) =>
        (sequence === undefined
          ? await changed(`DELETE FROM ${P} WHERE sem_key = ? AND owner = ?`, [k(key), owner])
          : await changed(
              `DELETE FROM ${P} WHERE sem_key = ? AND owner = ? AND granted = 1 AND sequence = CAST(? AS SIGNED)`,
              [k(key), owner, sequence.toString()],
            )) > 0,
      forgetIfIdle: async (key) => {
        const left = await rowsOf(`SELECT 1 FROM ${P} WHERE sem_key = ? LIMIT 1 FOR UPDATE`, [k(key)])
        if (left.length === 0) await run(`DELETE FROM ${S} WHERE sem_key = ?`, [k(key)])
      },
      setLimit: async (key, limit) => {
        await run(
          `INSERT INTO ${S} (sem_key, permit_limit, last_sequence) VALUES (?, ?, 0)
           ON DUPLICATE KEY UPDATE permit_limit = VALUES(permit_limit)`,
          [k(key), limit],
        )
      },
      notify: async () => {},
      idle: async (limit) =>
        (
          await rowsOf(
            `SELECT sem_key FROM ${S} s WHERE NOT EXISTS (
               SELECT 1 FROM ${P} p WHERE p.sem_key = s.sem_key AND p.expires_at > ${NOW_US})
             LIMIT ? FOR UPDATE SKIP LOCKED`,
            [limit],
          )
        ).map((row) => Buffer.from(row.sem_key as Buffer).toString('utf8')),
    }
  }

  async extend(key: string, owner: string, sequence: bigint, ttlMs: number, _signal: AbortSignal) {
    try {
      const [result] = await this.#pool.query(
        `UPDATE ${this.#permits} SET expires_at = ${NOW_US} + CAST(? AS SIGNED) * 1000
         WHERE sem_key = ? AND owner = ? AND granted = 1 AND sequence = CAST(? AS SIGNED)
           AND expires_at > ${NOW_US}`,
        [Math.floor(ttlMs), Buffer.from(key, 'utf8'), owner, sequence.toString()],
      )
      return (result as ResultSetHeader).affectedRows > 0 ? ttlMs : undefined
    } catch (error) {
      throw this.#unavailable(error, 'renew permits of', key)
    }
  }

  async tableExists(_signal: AbortSignal): Promise<boolean> {
    try {
      for (const [database, table] of this.#names) {
        const [rows] = await this.#pool.query(tableExistsSql, [database, table])
        if (Number((rows as RowDataPacket[])[0]?.n) === 0) return false
      }
      return true
    } catch (error) {
      throw this.#unavailable(error, `check the semaphore tables ${this.table}`)
    }
  }

  async createTable(_signal: AbortSignal): Promise<void> {
    try {
      for (const statement of semaphoreTablesDdl(this.#sems, this.#permits)) await this.#pool.query(statement)
    } catch (error) {
      throw this.#unavailable(error, `create the semaphore tables ${this.table}`)
    }
  }

  ddl(): string {
    return semaphoreTablesDdl(this.#sems, this.#permits)
      .map((statement) => `${statement};`)
      .join('\n')
  }

  /** The pool is the lock table adapter's (or the user's): not ended here. */
  async close(): Promise<void> {}
}

function toPermit(row: RowDataPacket): SqlPermitRow {
  return {
    owner: String(row.owner),
    permits: Number(row.permits),
    granted: Number(row.granted) === 1,
    sequence: BigInt(String(row.sequence)),
    remainingMs: Number(row.ms),
    ...(row.holder === null || row.holder === undefined ? {} : { holder: String(row.holder) }),
  }
}
