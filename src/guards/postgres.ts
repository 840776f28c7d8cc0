/**
 * The fence guard for a PostgreSQL row (`fencelock/guards/postgres`): the write itself checks the fence,
 * in the same statement (sql-update.ts), so a holder paused past its lease (a GC pause, a stopped VM)
 * cannot overwrite what the next holder wrote, whatever it believes about its lock. Works with any
 * lock backend: the fence comes from the lock, the check from the row. Takes the `postgres` (porsager)
 * instance the application already has; imports nothing of it.
 */
import { type GuardedUpdate, guardedUpdateStatement, type SqlGuardDialect } from './sql-update.js'

export type { GuardedUpdate } from './sql-update.js'

/** The one method of a `postgres` (porsager) instance, transaction or reserved connection used here. */
export interface PostgresUnsafe {
  /** Runs `query` with `$n` placeholders bound to `parameters`; resolves the rows it returned. */
  unsafe(query: string, parameters?: never[]): PromiseLike<ArrayLike<unknown>>
}

const POSTGRES: SqlGuardDialect = {
  name: 'PostgreSQL',
  quote: (identifier) => `"${identifier.replaceAll('"', '""')}"`,
  parameter: (n) => `$${n}`,
  bigint: (parameter) => `${parameter}::bigint`,
}

/**
 * Writes `set` to the row `where` only if its fence column is NULL or not greater than `fence`, and
 * stores `fence` in it, in one statement. Returns false when nothing was written: a later holder has
 * written (your lock is stale: stop), or there is no such row.
 * @throws TypeError when `fence` is not a lock's fence or `where` is empty.
 * @example
 * // once: ALTER TABLE report ADD COLUMN fence bigint
 * await using lock = await locks.acquire('report:7')
 * const ok = await guardedUpdate(sql, { table: 'report', set: { body }, where: { id: 7 }, fence: lock.fence })
 * if (!ok) throw new Error('a later holder of report:7 has written; giving up')
 */
export async function guardedUpdate(sql: PostgresUnsafe, update: GuardedUpdate): Promise<boolean> {
  const { text, params } = guardedUpdateStatement(update, POSTGRES)
  const rows = await sql.unsafe(`${text} RETURNING 1`, params as never[])
  return rows.length > 0
}
