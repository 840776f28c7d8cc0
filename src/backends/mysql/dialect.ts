/**
 * The MySQL/MariaDB dialect of the sql-lease engine: the statements of statements.ts over the user's
 * mysql2 pool (promise API), the doorbell of doorbell.ts, and errors in words.
 */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise'
import type { BackendLimits, DoctorFinding } from '../../core/backend.js'
import { BackendUnavailableError, causeText, describeNetworkError } from '../../core/errors.js'
import type { SqlAcquired, SqlAcquireRequest, SqlDialect, SqlRow } from '../../engines/sql-lease-driver.js'
import { mysqlDoctor } from './doctor.js'
import { Bells, DoorbellWaits } from './doorbell.js'
import { doorbellName, MAX_KEY_BYTES, tableDdl } from './layout.js'
import { acquireSql, extendSql, readSql, releaseSql, tableExistsSql, watchSql } from './statements.js'

/** Keys up to the key column's 3072 bytes; leases up to 2^31 ms (24.8 days: Node's timers). */
export const MYSQL_LIMITS: BackendLimits = { maxKeyBytes: MAX_KEY_BYTES, maxTtlMs: 2 ** 31 - 1 }

/** The client flag that makes affected rows count matched rows instead of changed ones. */
const CLIENT_FOUND_ROWS = 2

/** mysql2's error fields we read. */
interface DriverError {
  readonly code?: string
  readonly errno?: number
  readonly sqlMessage?: string
  readonly fatal?: boolean
}

/** Errors that stay until someone changes something: waiting cannot help. */
const SETTING = new Set([
  'ER_ACCESS_DENIED_ERROR',
  'ER_DBACCESS_DENIED_ERROR',
  'ER_TABLEACCESS_DENIED_ERROR',
  'ER_BAD_DB_ERROR',
  'ER_PARSE_ERROR',
  'ER_NO_SUCH_TABLE',
  'ER_BAD_FIELD_ERROR',
  'ER_NOT_SUPPORTED_AUTH_MODE',
])

/**
 * Refuses a pool whose connections report matched rows as affected (CLIENT_FOUND_ROWS, mysql2's default):
 * then "held by someone else" and "inserted" both report one row, and the acquire cannot tell them apart.
 */
export function checkFoundRowsOff(pool: Pool): void {
  const flags = (pool as unknown as { pool?: { config?: { connectionConfig?: { clientFlags?: number } } } })
    .pool?.config?.connectionConfig?.clientFlags
  if (typeof flags !== 'number') {
    throw new TypeError('Expected `pool` to be a pool of mysql2/promise (`mysql.createPool(...)`)')
  }
  if ((flags & CLIENT_FOUND_ROWS) !== 0) {
    throw new TypeError(
      "Expected a mysql2 pool made with `flags: ['-FOUND_ROWS']`: with FOUND_ROWS on (mysql2's default), an " +
        'INSERT … ON DUPLICATE KEY UPDATE that changed nothing (the lock is held by someone else) reports one ' +
        'affected row, like an insert (a grant), so fencelock could not tell them apart',
    )
  }
}

/** "Rows matched: N" of an UPDATE's reply: counts matched rows whatever CLIENT_FOUND_ROWS says. */
function matched(result: ResultSetHeader): number {
  const found = /Rows matched:\s*(\d+)/.exec(result.info ?? '')
  return found ? Number(found[1]) : result.affectedRows
}

export interface MySqlDialectOptions {
  readonly pool: Pool
  /** The table, quoted (`\`db\`.\`locks\``). */
  readonly table: string
  /** The table's name and database as information_schema spells them. */
  readonly tableName: string
  readonly database?: string | undefined
  readonly id: string
  /** The pool was made from a URL: close ends it. */
  readonly owned: boolean
  /** Wake waiters with the GET_LOCK doorbell (doorbell.ts); off, waiters poll (the engine's pace). */
  readonly doorbell: boolean
}

export class MySqlDialect implements SqlDialect {
  readonly id: string
  readonly limits = MYSQL_LIMITS
  readonly table: string
  readonly #options: MySqlDialectOptions
  readonly #pool: Pool
  readonly #sql: {
    acquire: string
    extend: string
    release: string
    abandon: string
    read: string
    watch: string
  }
  readonly #bells: Bells | undefined
  readonly #waits: DoorbellWaits | undefined
  /** The doorbell wait (absent with the doorbell off: the engine then polls). */
  readonly watch?: (key: string, signal: AbortSignal) => Promise<void>
  #closed: Promise<void> | undefined

  constructor(options: MySqlDialectOptions) {
    this.#options = options
    this.#pool = options.pool
    this.id = options.id
    this.table = options.table
    const t = options.table
    this.#sql = {
      acquire: acquireSql(t),
      extend: extendSql(t),
      release: releaseSql(t, true),
      abandon: releaseSql(t, false),
      read: readSql(t),
      watch: watchSql(t),
    }
    if (options.doorbell) {
      const waits = new DoorbellWaits(this.#pool, this.#sql.watch)
      this.#bells = new Bells(this.#pool)
      this.#waits = waits
      this.watch = (key, signal) => waits.wait(key, this.#bell(key), signal)
    }
  }

  #bell(key: string): string {
    return doorbellName(this.table, key)
  }

  async #run<T>(key: string | undefined, sql: string, params: unknown[]): Promise<T> {
    try {
      const [result] = await this.#pool.query(sql, params)
      return result as T
    } catch (cause) {
      const e = (cause ?? {}) as DriverError
      const reason = describeNetworkError(cause) ?? causeText(cause)
      throw new BackendUnavailableError(
        `${this.id} failed${key === undefined ? '' : ` for "${key}"`}: ${e.code ? `${e.code}: ` : ''}${reason}`,
        { key, backend: this.id, cause, retryable: !SETTING.has(e.code ?? '') },
      )
    }
  }

  async acquire(req: SqlAcquireRequest, _signal: AbortSignal): Promise<SqlAcquired> {
    const holder = req.holder ?? null
    const result = await this.#run<ResultSetHeader>(req.key, this.#sql.acquire, [
      req.key,
      req.owner,
      req.ttlMs,
      holder,
      req.owner,
      req.owner,
      holder,
      req.ttlMs,
    ])
    // 1: inserted (fence 1); 2: taken over or ours renewed (the fence in the OK packet); 0: held.
    if (result.affectedRows === 0) {
      return { granted: false, remainingMs: Number(result.insertId) }
    }
    const fence = result.affectedRows === 1 ? 1n : await this.#fence(req, result.insertId)
    this.#bells?.ring(this.#bell(req.key))
    return { granted: true, fence, leaseMs: req.ttlMs }
  }

  /**
   * The fence of a grant from the OK packet, exact when the pool returns big numbers as strings; past
   * 2^53 without them the number is rounded, so read it from the row (ours: we were just granted).
   */
  async #fence(req: SqlAcquireRequest, insertId: number | string): Promise<bigint> {
    if (typeof insertId === 'string') return BigInt(insertId)
    if (Number.isSafeInteger(insertId)) return BigInt(insertId)
    const row = await this.read(req.key, new AbortController().signal)
    if (row?.owner !== req.owner) {
      throw new BackendUnavailableError(`${this.id}: the fence of "${req.key}" could not be read back`, {
        key: req.key,
        backend: this.id,
      })
    }
    return row.fence
  }

  async extend(key: string, owner: string, fence: bigint, ttlMs: number): Promise<number | undefined> {
    const result = await this.#run<ResultSetHeader>(key, this.#sql.extend, [ttlMs, key, owner, String(fence)])
    if (matched(result) === 0) {
      this.#bells?.silence(this.#bell(key))
      return undefined
    }
    // A doorbell lost with its connection is taken again here.
    this.#bells?.ensure(this.#bell(key))
    return ttlMs
  }

  async release(key: string, owner: string, fence: bigint | undefined): Promise<boolean> {
    const result =
      fence === undefined
        ? await this.#run<ResultSetHeader>(key, this.#sql.abandon, [key, owner])
        : await this.#run<ResultSetHeader>(key, this.#sql.release, [key, owner, String(fence)])
    // After the row: a waiter the bell wakes must find it free.
    if (fence !== undefined) this.#bells?.silence(this.#bell(key))
    return matched(result) > 0
  }

  async read(key: string, _signal: AbortSignal): Promise<SqlRow | undefined> {
    const rows = await this.#run<RowDataPacket[]>(key, this.#sql.read, [key])
    const row = rows[0]
    if (row === undefined) return undefined
    const released = Number(row.released) === 1
    return {
      owner: String(row.owner),
      fence: BigInt(row.fence as string),
      remainingMs: released ? -1 : Math.floor(Number(row.remaining_us) / 1000),
      released,
      holder: row.holder === null ? undefined : String(row.holder),
    }
  }

  async tableExists(_signal: AbortSignal): Promise<boolean> {
    const rows = await this.#run<RowDataPacket[]>(undefined, tableExistsSql, [
      this.#options.database ?? null,
      this.#options.tableName,
    ])
    return Number(rows[0]?.n) > 0
  }

  async createTable(_signal: AbortSignal): Promise<void> {
    // CREATE TABLE IF NOT EXISTS: a concurrent creator's table is as good as ours.
    await this.#run(undefined, this.ddl(), [])
  }

  ddl(): string {
    return tableDdl(this.table)
  }

  doctor(_signal: AbortSignal): Promise<DoctorFinding[]> {
    return mysqlDoctor((sql) => this.#run<RowDataPacket[]>(undefined, sql, []))
  }

  /** Idempotent: the client and its caller may both close (ending a pool twice throws). */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#waits?.close()
      await this.#bells?.close()
      if (this.#options.owned) await this.#pool.end()
    })()
    return this.#closed
  }
}
