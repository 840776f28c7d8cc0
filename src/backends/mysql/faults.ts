/**
 * How the mysql2 pool fails, in words, and whether waiting could help; the pool setting the acquire
 * statement cannot work without (CLIENT_FOUND_ROWS off), and what else fencelock reads of the pool's config.
 */
import type { Pool } from 'mysql2/promise'
import { causeText, describeNetworkError } from '../../core/errors.js'

/** The client flag that makes affected rows count matched rows instead of changed ones. */
const CLIENT_FOUND_ROWS = 2

/** A statement's parameter. */
export type SqlParam = string | number | null

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

/** What fencelock reads of a mysql2 pool's configuration (the promise pool wraps the callback one). */
interface PoolConfig {
  readonly connectionLimit?: number
  readonly connectionConfig?: { readonly clientFlags?: number; readonly database?: string }
}

function configOf(pool: Pool): PoolConfig | undefined {
  return (pool as unknown as { pool?: { config?: PoolConfig } }).pool?.config
}

/** The database a pool's connections start in (`undefined` when its config names none). */
export function poolDatabase(pool: Pool): string | undefined {
  return configOf(pool)?.connectionConfig?.database || undefined
}

/** How many connections a pool opens at most (mysql2's default: 10). */
export function poolConnectionLimit(pool: Pool): number {
  const limit = configOf(pool)?.connectionLimit
  return typeof limit === 'number' && limit > 0 ? limit : 10
}

/**
 * Refuses a pool whose connections report matched rows as affected (CLIENT_FOUND_ROWS, mysql2's default):
 * then "held by someone else" and "inserted" both report one row, and the acquire cannot tell them apart.
 */
export function checkFoundRowsOff(pool: Pool): void {
  const flags = configOf(pool)?.connectionConfig?.clientFlags
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

/** The error in one line, and whether waiting could help (a restart, a failover: yes; a wrong password: no). */
export function describeFailure(error: unknown): { text: string; retryable: boolean } {
  const e = (error ?? {}) as DriverError
  const reason = describeNetworkError(error) ?? causeText(error)
  return { text: `${e.code ? `${e.code}: ` : ''}${reason}`, retryable: !SETTING.has(e.code ?? '') }
}
