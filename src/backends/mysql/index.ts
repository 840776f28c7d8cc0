/**
 * The MySQL/MariaDB backend: the sql-lease engine (src/engines/sql/engine.ts) over one lease row per lock,
 * each primitive one statement on the server's clock, through the user's mysql2 pool (promise API).
 *
 * - Layout: a table (default `fencelock_locks` in the connection's database, created on first use unless
 *   `createTable` is off) with one row per lock held or recently held: `lock_key` (the key's bytes, VARBINARY
 *   primary key), `owner`, `fence` (BIGINT), `expires_at` (microseconds since the epoch on the server's
 *   clock), `released`, `holder` (layout.ts has the DDL). Acquire is one INSERT … SELECT … ON DUPLICATE
 *   KEY UPDATE with one reading of the clock, whose every assignment reaches the same decision whatever
 *   the session's `sql_mode` (statements.ts); fencelock's own connections pin their settings anyway.
 * - Expiry: the server's clock (`SYSDATE(6)`, read once per statement) decides, inside the statement that
 *   takes a row over. Client clocks never matter; the holder counts its validity on its own monotonic
 *   clock from before the statement was sent.
 * - Fence: the `fence` column, advanced by the granting statement and handed back in the same reply
 *   (`LAST_INSERT_ID(fence)`, the OK packet's insert id); renewals and releases keep it. A row made anew
 *   (first use, after a DELETE, TRUNCATE or a recreated table, or after fencelock retired it) starts from
 *   the server's clock in microseconds, and a take is at least that clock, so fences never go back while
 *   the server's clock does not (statements.ts, `FENCE_EPOCH`, `RETIRE_BEFORE`); durable as InnoDB's
 *   commits.
 * - Retire: a release marks its row released; a row released or expired over a minute ago (and over twice
 *   `innodb_lock_wait_timeout`: the margin the clock-made fences need) is deleted by the engine's
 *   housekeeping after a later grant (statements.ts, `retireDueSql`).
 * - Waiting: MySQL has no notifications; a doorbell stands in (doorbell.ts): a named lock per lock
 *   (`GET_LOCK`, named after the database, table and key), taken by the granting statement itself and
 *   freed by the release statement, on the connection (one of a few per client) it ran on; a waiter blocks
 *   in one statement until that named lock is freed, the holder's lease ends (the server computes the
 *   timeout from the row) or 5 s pass. The bell only wakes: the lease row alone grants. A waiting key costs
 *   one blocking statement and one attempt per `DOORBELL_POLL_MAX_MS` (5 s) or per lease left.
 * - List and break: `list` pages through the held rows by their binary key; `break` marks the row
 *   released, conditioned on the owner and fence it read (row and fence kept); another client's bell
 *   stays with it, so its waiters wake within their doorbell wait's 5 s.
 * - Elections (src/engines/sql-election.ts): the same engine over `<table>_elections` beside the lock table
 *   (its columns plus `value`), without the doorbell: candidates and observers read at most once a second.
 * - Semaphores (src/engines/sql/semaphore.ts, semaphore.ts): `<table>_semaphores` (a row per semaphore in
 *   use: its limit, its latest sequence) and `<table>_permits` (a row per grant or place in line), each
 *   acquire one transaction that locks the semaphore's row; sequences from the server's clock in µs; no
 *   doorbell (waiters poll). Names up to 3000 bytes. Lock names and semaphore names never meet; list and
 *   break see locks only.
 * - Read-write locks (src/engines/sql/rwlock.ts, rwlock.ts): `<table>_rwlocks` (a row per lock in use: its
 *   latest fence, its read epoch) and `<table>_rwlock_entries` (a row per reader or writer in line), each
 *   acquire one transaction that locks the name's row, each downgrade one statement; fences from the
 *   server's clock in µs; no doorbell (waiters poll). Names up to 3000 bytes.
 * - Limits: keys up to 3072 bytes (InnoDB's longest index key), leases up to 24.8 days. The pool must have
 *   FOUND_ROWS off (`flags: ['-FOUND_ROWS']`, refused otherwise). With the doorbell, a client keeps up to a
 *   third of the pool's connections (1 to 4) for its lease statements and blocks at most half of the rest
 *   in doorbell waits (waiters of further keys poll). `SYSDATE()` is unsafe for statement-based
 *   replication (use `binlog_format=ROW`); a failover to an asynchronous replica can lose the latest grants
 *   and fences. `doctor` reports these, the server's `sql_mode` and its time zone.
 *
 * Files: statements.ts (the SQL, each with its inputs and outputs), adapter.ts (the adapter: statements
 * over the pool, errors in words), semaphore.ts and rwlock.ts (those primitives' adapters), transaction.ts
 * (their transactions), doorbell.ts (the GET_LOCK doorbell), layout.ts (table, DDL, doorbell
 * names), doctor.ts (version, time zone, binlog format, replication).
 */
import type { Pool } from 'mysql2/promise'
import type { LockBackend } from '../../core/backend.js'
import { loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { sqlLeaseBackend } from '../../engines/sql/backend.js'
import { MySqlAdapter } from './adapter.js'
import { checkFoundRowsOff, poolDatabase } from './faults.js'
import { DEFAULT_TABLE, electionsTableName, quoteTable } from './layout.js'
import { MySqlRwLockAdapter } from './rwlock.js'
import { MySqlSemaphoreAdapter } from './semaphore.js'
import { SESSION_SETTINGS } from './statements.js'

export { MYSQL_LIMITS, MySqlAdapter } from './adapter.js'
export { checkFoundRowsOff } from './faults.js'
export { DEFAULT_TABLE, doorbellName, electionsTableName, quoteTable, tableDdl } from './layout.js'

/** What `mysqlBackend` is told. */
export interface MySqlBackendOptions {
  /**
   * Your mysql2 pool (`mysql2/promise`'s `createPool`), made with `flags: ['-FOUND_ROWS']`. fencelock
   * never ends it; it keeps up to a third of its connections (1 to 4) for its lease statements, in its
   * own session settings (destroyed on close, never given back), and blocks at most half of the rest in
   * doorbell waits, up to 5 s each.
   */
  readonly pool: Pool
  /** The lock table, optionally `database.table`. @default 'fencelock_locks' */
  readonly table?: string | undefined
  /** Create the table on first use when it does not exist. @default true */
  readonly createTable?: boolean | undefined
  /**
   * Wake waiters with a `GET_LOCK` doorbell; off, they poll (at most once a second). Turn it off behind a
   * proxy that multiplexes connections (ProxySQL pins a connection that took a named lock).
   * @default true
   */
  readonly doorbell?: boolean | undefined
  /** Names the store in errors. @default 'mysql' */
  readonly id?: string | undefined
}

/**
 * With the doorbell waking waiters, a held key is re-asked at most this often (or at its lease's end);
 * without it, once a second (the engine's default).
 */
const DOORBELL_POLL_MAX_MS = 5000

function backendOf(
  pool: Pool,
  settings: { table: string; createTable: boolean; doorbell: boolean; id: string; owned: boolean },
): LockBackend {
  const adapterOn = (tableName: string, more: { doorbell: boolean; owned: boolean; election?: boolean }) => {
    const [database, name] = tableName.includes('.') ? tableName.split('.') : [undefined, tableName]
    return new MySqlAdapter({
      ...settings,
      ...more,
      pool,
      table: quoteTable(tableName, 'as `table`'),
      tableName: name!,
      database,
      bellDatabase: database ?? poolDatabase(pool) ?? '',
    })
  }
  const mutex = adapterOn(settings.table, settings)
  // Elections: no doorbell (candidates poll once a second, observers too: docs/backends/mysql.md says
  // why), so they take no connections of their own; the mutex's adapter alone ends the pool.
  const elections = adapterOn(electionsTableName(settings.table), {
    doorbell: false,
    owned: false,
    election: true,
  })
  // Semaphores: no doorbell either (waiters poll); transactions on pool connections.
  const semaphores = new MySqlSemaphoreAdapter({ pool, tableName: settings.table, id: settings.id })
  // Read-write locks: as semaphores (waiters poll).
  const rwlocks = new MySqlRwLockAdapter({ pool, tableName: settings.table, id: settings.id })
  return sqlLeaseBackend(
    mutex,
    { createTable: settings.createTable, ...(settings.doorbell ? { pollMaxMs: DOORBELL_POLL_MAX_MS } : {}) },
    { adapter: elections, options: { createTable: settings.createTable } },
    { adapter: semaphores, options: { createTable: settings.createTable } },
    { adapter: rwlocks, options: { createTable: settings.createTable } },
  )
}

/**
 * Creates a MySQL/MariaDB backend over your mysql2 pool.
 * @example
 * import mysql from 'mysql2/promise'
 * const pool = mysql.createPool({ uri: 'mysql://app@db.internal/app', flags: ['-FOUND_ROWS'] })
 * const locks = createLockClient(mysqlBackend({ pool }))
 * @throws {TypeError} when the pool has FOUND_ROWS on (mysql2's default)
 */
export function mysqlBackend(options: MySqlBackendOptions): LockBackend {
  const { pool } = options
  if (!pool || typeof (pool as { query?: unknown }).query !== 'function') {
    throw new TypeError('Expected `pool` to be a pool of mysql2/promise (`mysql.createPool(...)`)')
  }
  checkFoundRowsOff(pool)
  return backendOf(pool, {
    table: options.table ?? DEFAULT_TABLE,
    createTable: options.createTable ?? true,
    doorbell: options.doorbell ?? true,
    id: options.id ?? 'mysql',
    owned: false,
  })
}

/** The URL parameters of `mysql://` and `mariadb://` (tested against its page in docs/backends/, like every backend's). */
export const PARAMS = {
  table: {
    type: 'string',
    default: DEFAULT_TABLE,
    doc: 'the lock table, optionally database.table',
  },
  createTable: { type: 'bool', default: true, doc: 'create the table on first use when it does not exist' },
  doorbell: {
    type: 'bool',
    default: true,
    doc: 'wake waiters with a GET_LOCK doorbell (false: they poll once a second; for connection-multiplexing proxies)',
  },
} as const satisfies ParamSchema

/**
 * `mysql://user:password@host:port/database?table=&createTable=&doorbell=` (and `mariadb://`): fencelock makes its
 * own pool (FOUND_ROWS off, BIGINTs as strings) and ends it on close.
 */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const mysql = await loadDriver('mysql2', 'mysql', url, () => import('mysql2/promise'))
  const params = readParams(url, PARAMS)
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''))
  if (database === '' || database.includes('/')) {
    throw new TypeError(`Expected mysql://user:password@host:port/DATABASE, got ${redact(url)}`)
  }
  quoteTable(params.table, `in ${redact(url)}`)
  const pool = mysql.createPool({
    host: url.hostname,
    port: url.port === '' ? 3306 : Number(url.port),
    user: decodeURIComponent(url.username),
    password: decodeURIComponent(url.password),
    database,
    flags: ['-FOUND_ROWS'],
    supportBigNumbers: true,
    bigNumberStrings: true,
    // A handshake whose bytes a partition dropped never completes: mysql2's default would leave the
    // lease connection (and every statement queued on it) waiting 10 s after the network healed, longer
    // than an acquire waits for an unreachable store (5 s). A handshake on a working network takes
    // milliseconds; 3 s fails the dead one in time for the next attempt to take a fresh connection.
    connectTimeout: 3000,
  })
  // Every connection of our own pool runs in our session settings, whatever the server's defaults are.
  // (The core pool's event: it hands over the callback connection, whose first statement this is.)
  pool.pool.on('connection', (connection) => {
    connection.query(SESSION_SETTINGS, () => {})
  })
  return backendOf(pool, { ...params, id: redact(url), owned: true })
}
