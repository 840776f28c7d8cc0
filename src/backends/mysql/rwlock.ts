/**
 * The MySQL/MariaDB adapter of the sql engine's read-write lock (src/engines/sql/rwlock.ts decides): the SQL
 * of its transaction's steps over `<table>_rwlocks` and `<table>_rwlock_entries` (layout.ts), each
 * transaction on one pool connection (transaction.ts), its reads of entries locking. Times are µs since
 * 1970 on the server's clock (`UNIX_TIMESTAMP(SYSDATE(6))`: the same in every session's time zone). Places
 * and fences: the larger of the largest one read under the lock's row + 1 and the server's clock in µs + 1 s,
 * as the lock's fences (see `FENCE_EPOCH` in statements.ts): they never go back, also after an idle lock's
 * rows were deleted, unless the server's clock is set back. No notifications: waiters poll (the core's
 * pace, at most once a second and at the soonest lease end).
 */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise'
import type { RwLockMode } from '../../core/backend.js'
import { BackendUnavailableError, quoteKey } from '../../core/errors.js'
import type { SqlRwEntry, SqlRwLockAdapter, SqlRwLockTx } from '../../engines/sql/rwlock-adapter.js'
import { matched } from './adapter.js'
import { describeFailure } from './faults.js'
import { MAX_SEMAPHORE_KEY_BYTES, rwlockTableNames, rwlockTablesDdl } from './layout.js'
import { NOW_US, tableExistsSql } from './statements.js'
import { inTransaction, type Param, type Run } from './transaction.js'

interface Options {
  readonly pool: Pool
  /** The lock table's name as given (`db.locks` or `locks`): the read-write lock tables are named after it. */
  readonly tableName: string
  readonly id: string
}

const REMAINING = `(expires_at - ${NOW_US}) / 1000`
const ROW = 'CAST(last_fence AS CHAR) AS latest, CAST(epoch AS CHAR) AS epoch'

export class MySqlRwLockAdapter implements SqlRwLockAdapter {
  readonly id: string
  readonly limits = { maxKeyBytes: MAX_SEMAPHORE_KEY_BYTES, maxTtlMs: 2 ** 31 - 1 }
  readonly table: string
  readonly #pool: Pool
  readonly #locks: string
  readonly #entries: string
  /** [database or null, table] of each, as information_schema spells them. */
  readonly #names: readonly (readonly [string | null, string])[]

  constructor(options: Options) {
    this.#pool = options.pool
    this.id = options.id
    const names = rwlockTableNames(options.tableName)
    this.#locks = names.rwlocks.quoted
    this.#entries = names.entries.quoted
    this.#names = [names.rwlocks.parts, names.entries.parts]
    this.table = `${this.#locks} and ${this.#entries}`
  }

  async transaction<T>(
    what: string,
    key: string | undefined,
    body: (tx: SqlRwLockTx) => Promise<T>,
  ): Promise<T> {
    try {
      return await inTransaction(this.#pool, (run) => body(this.#tx(run)))
    } catch (error) {
      if (error instanceof TypeError) throw error
      throw this.#unavailable(error, what, key)
    }
  }

  /** A failed statement as the error the core expects: "Could not <what>[ read-write lock <key>] on <store>: why". */
  #unavailable(error: unknown, what: string, key?: string): BackendUnavailableError {
    const { text, retryable } = describeFailure(error)
    return new BackendUnavailableError(
      `Could not ${what}${key === undefined ? '' : ` read-write lock ${quoteKey(key)}`} on ${this.id}: ${text}`,
      { key, backend: this.id, cause: error, retryable },
    )
  }

  #tx(run: Run): SqlRwLockTx {
    const L = this.#locks
    const E = this.#entries
    const rowsOf = async (sql: string, params: Param[]) => (await run(sql, params)) as RowDataPacket[]
    const changed = async (sql: string, params: Param[]) =>
      ((await run(sql, params)) as ResultSetHeader).affectedRows
    const lockRow = (rows: RowDataPacket[]) => {
      const row = rows[0]
      return row === undefined
        ? undefined
        : { latest: BigInt(String(row.latest)), epoch: BigInt(String(row.epoch)) }
    }
    const k = (key: string) => Buffer.from(key, 'utf8')
    return {
      lock: async (key, create) => {
        if (create) {
          // A row there already is kept as it is (and locked by the SELECT below).
          await run(
            `INSERT INTO ${L} (rw_key, last_fence, epoch) VALUES (?, 0, 0)
             ON DUPLICATE KEY UPDATE last_fence = last_fence`,
            [k(key)],
          )
        }
        return lockRow(await rowsOf(`SELECT ${ROW} FROM ${L} WHERE rw_key = ? FOR UPDATE`, [k(key)]))
      },
      peek: async (key) => lockRow(await rowsOf(`SELECT ${ROW} FROM ${L} WHERE rw_key = ?`, [k(key)])),
      purge: async (key) => {
        await run(`DELETE FROM ${E} WHERE rw_key = ? AND expires_at <= ${NOW_US}`, [k(key)])
      },
      entries: async (key, lock) =>
        (
          await rowsOf(
            `SELECT owner, mode, CAST(place AS CHAR) AS place, CAST(fence AS CHAR) AS fence,
               ${REMAINING} AS ms, holder
             FROM ${E} WHERE rw_key = ?${lock ? ' FOR UPDATE' : ''}`,
            [k(key)],
          )
        ).map(toEntry),
      next: async (after) => {
        const rows = await rowsOf(
          `SELECT CAST(GREATEST(CAST(? AS SIGNED) + 1, ${NOW_US} + 1000000) AS CHAR) AS v`,
          [after.toString()],
        )
        return BigInt(String(rows[0]!.v))
      },
      record: async (key, row) => {
        await run(
          `UPDATE ${L} SET last_fence = CAST(? AS SIGNED), epoch = CAST(? AS SIGNED) WHERE rw_key = ?`,
          [row.latest.toString(), row.epoch.toString(), k(key)],
        )
      },
      put: async (w) => {
        await run(
          `INSERT INTO ${E} (rw_key, owner, mode, place, fence, expires_at, holder)
           VALUES (?, ?, ?, CAST(? AS SIGNED), CAST(? AS SIGNED), ${NOW_US} + CAST(? AS SIGNED) * 1000, ?)
           ON DUPLICATE KEY UPDATE mode = VALUES(mode), place = VALUES(place), fence = VALUES(fence),
             expires_at = VALUES(expires_at), holder = VALUES(holder)`,
          [
            k(w.key),
            w.owner,
            w.mode,
            w.place.toString(),
            w.fence?.toString() ?? null,
            Math.ceil(w.ms),
            w.holder ?? null,
          ],
        )
      },
      remove: async (key, owner, fence) =>
        (fence === undefined
          ? await changed(`DELETE FROM ${E} WHERE rw_key = ? AND owner = ?`, [k(key), owner])
          : await changed(`DELETE FROM ${E} WHERE rw_key = ? AND owner = ? AND fence = CAST(? AS SIGNED)`, [
              k(key),
              owner,
              fence.toString(),
            ])) > 0,
      forgetIfIdle: async (key) => {
        const left = await rowsOf(`SELECT 1 FROM ${E} WHERE rw_key = ? LIMIT 1 FOR UPDATE`, [k(key)])
        if (left.length === 0) await run(`DELETE FROM ${L} WHERE rw_key = ?`, [k(key)])
      },
      notify: async () => {},
      idle: async (limit) =>
        (
          await rowsOf(
            `SELECT rw_key FROM ${L} l WHERE NOT EXISTS (
               SELECT 1 FROM ${E} e WHERE e.rw_key = l.rw_key AND e.expires_at > ${NOW_US})
             LIMIT ? FOR UPDATE SKIP LOCKED`,
            [limit],
          )
        ).map((row) => Buffer.from(row.rw_key as Buffer).toString('utf8')),
    }
  }

  async extend(key: string, owner: string, fence: bigint, ttlMs: number, _signal: AbortSignal) {
    return (
      (await this.#one(
        'renew',
        key,
        `UPDATE ${this.#entries} SET expires_at = ${NOW_US} + CAST(? AS SIGNED) * 1000
         WHERE rw_key = ? AND owner = ? AND fence = CAST(? AS SIGNED) AND expires_at > ${NOW_US}`,
        [Math.floor(ttlMs), Buffer.from(key, 'utf8'), owner, fence.toString()],
      )) > 0
    )
  }

  /** Matched rows, not changed ones: an entry already a reader (a lost reply's downgrade) counts. */
  async downgrade(key: string, owner: string, fence: bigint, _signal: AbortSignal) {
    return (
      (await this.#one(
        'downgrade',
        key,
        `UPDATE ${this.#entries} SET mode = 'read' WHERE rw_key = ? AND owner = ? AND fence = CAST(? AS SIGNED)`,
        [Buffer.from(key, 'utf8'), owner, fence.toString()],
      )) > 0
    )
  }

  async tableExists(_signal: AbortSignal): Promise<boolean> {
    try {
      for (const [database, table] of this.#names) {
        const [rows] = await this.#pool.query(tableExistsSql, [database, table])
        if (Number((rows as RowDataPacket[])[0]?.n) === 0) return false
      }
      return true
    } catch (error) {
      throw this.#unavailable(error, `check the read-write lock tables ${this.table}`)
    }
  }

  async createTable(_signal: AbortSignal): Promise<void> {
    try {
      for (const statement of rwlockTablesDdl(this.#locks, this.#entries)) await this.#pool.query(statement)
    } catch (error) {
      throw this.#unavailable(error, `create the read-write lock tables ${this.table}`)
    }
  }

  ddl(): string {
    return rwlockTablesDdl(this.#locks, this.#entries)
      .map((statement) => `${statement};`)
      .join('\n')
  }

  /** The pool is the lock table adapter's (or the user's): not ended here. */
  async close(): Promise<void> {}

  /** ONE statement outside a transaction: the rows it matched. */
  async #one(what: string, key: string, sql: string, params: Param[]): Promise<number> {
    try {
      const [result] = await this.#pool.query(sql, params)
      return matched(result as ResultSetHeader)
    } catch (error) {
      throw this.#unavailable(error, what, key)
    }
  }
}

function toEntry(row: RowDataPacket): SqlRwEntry {
  return {
    owner: String(row.owner),
    mode: String(row.mode) as RwLockMode,
    place: BigInt(String(row.place)),
    fence: row.fence === null || row.fence === undefined ? undefined : BigInt(String(row.fence)),
    remainingMs: Number(row.ms),
    ...(row.holder === null || row.holder === undefined ? {} : { holder: String(row.holder) }),
  }
}
