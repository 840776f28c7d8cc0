/**
 * The fence guard for a MySQL or MariaDB row (`fencelock/guards/mysql`): the write itself checks the
 * fence, in the same statement (sql-update.ts), so a holder paused past its lease cannot overwrite what
 * the next holder wrote. Works with any lock backend. Takes the application's `mysql2/promise` pool or
 * connection; imports nothing of it.
 *
 * Rows written are counted from the server's "Rows matched: N" (the OK packet's info), not from
 * `affectedRows`: without the FOUND_ROWS client flag (mysql2 sets it, other setups may not) a write
 * of the values already there changes nothing and `affectedRows` is 0, which is not a refusal.
 * Backtick quoting holds under every `sql_mode` (ANSI_QUOTES included).
 */
import { type GuardedUpdate, guardedUpdateStatement, type SqlGuardDialect } from './sql-update.js'

export type { GuardedUpdate } from './sql-update.js'

/** The one method of a `mysql2/promise` pool, pool connection or connection used here. */
export interface MysqlQuery {
  /** Runs `sql` with `?` placeholders bound to `values`; resolves `[result, fields]`. */
  query(sql: string, values: unknown[]): Promise<[unknown, unknown]>
}

const MYSQL: SqlGuardDialect = {
  name: 'MySQL/MariaDB',
  quote: (identifier) => `\`${identifier.replaceAll('`', '``')}\``,
  parameter: () => '?',
  bigint: (parameter) => `CAST(${parameter} AS SIGNED)`,
}

/**
 * Writes `set` to the row `where` only if its fence column is NULL or not greater than `fence`, and
 * stores `fence` in it, in one statement. Returns false when nothing was written: a later holder has
 * written (your lock is stale: stop), or there is no such row.
 * @throws TypeError when `fence` is not a lock's fence or `where` is empty.
 * @example
 * // once: ALTER TABLE report ADD COLUMN fence BIGINT NULL
 * await using lock = await locks.acquire('report:7')
 * const ok = await guardedUpdate(pool, { table: 'report', set: { body }, where: { id: 7 }, fence: lock.fence })
 * if (!ok) throw new Error('a later holder of report:7 has written; giving up')
 */
export async function guardedUpdate(mysql: MysqlQuery, update: GuardedUpdate): Promise<boolean> {
  const { text, params } = guardedUpdateStatement(update, MYSQL)
  const [result] = await mysql.query(text, params)
  return rowsMatched(result) > 0
}

/** The rows an UPDATE matched, from its result header (see the header comment). */
function rowsMatched(result: unknown): number {
  const header = result as { info?: unknown; affectedRows?: unknown }
  const matched = typeof header.info === 'string' ? /Rows matched:\s*(\d+)/.exec(header.info) : null
  if (matched) return Number(matched[1])
  if (typeof header.affectedRows === 'number') return header.affectedRows
  throw new TypeError('Expected the result of an UPDATE from mysql2 (a ResultSetHeader) from `query`')
}
