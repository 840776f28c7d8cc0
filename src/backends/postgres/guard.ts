/**
 * The fence guard for the resource a lock protects, when that resource is a PostgreSQL row: the write
 * itself checks the fence, in the same statement, so a holder that was paused past its lease (a GC pause,
 * a stopped VM) cannot overwrite what the next holder wrote, whatever it believes about its lock:
 *
 *   UPDATE <table> SET <columns…>, fence = $fence WHERE <key columns…> AND (fence IS NULL OR fence <= $fence)
 *
 * `<=`, not `<`: the same holder may write several times with its one fence; a later holder's fence is
 * strictly greater, so once it has written, every earlier holder's write matches no row.
 */

import { quoteIdent } from './layout.js'
import type { PgSql } from './sql.js'

/** What `guardedUpdate` writes, where, and under which fence. */
export interface GuardedUpdate {
  /** The protected table, `table` or `schema.table` (each part taken literally, quoted). */
  readonly table: string
  /** The columns to write and their values. */
  readonly set: Readonly<Record<string, unknown>>
  /** Which row: column = value for each entry (AND). */
  readonly where: Readonly<Record<string, unknown>>
  /** The lock's fence (`lock.fence`). */
  readonly fence: bigint
  /** The row's fence column (a bigint, NULL or 0 before the first guarded write). @default 'fence' */
  readonly fenceColumn?: string | undefined
}

/**
 * Writes `set` to the row `where` only if its fence is not greater than `fence`, and stores `fence` in it.
 * Returns false when nothing was written: a later holder has written (your lock is stale: stop), or there
 * is no such row.
 * @example
 * await using lock = await locks.acquire('report:7')
 * const ok = await guardedUpdate(sql, { table: 'report', set: { body }, where: { id: 7 }, fence: lock.fence })
 * if (!ok) throw new Error('a later holder of report:7 has written; giving up')
 */
export async function guardedUpdate(sql: Pick<PgSql, 'unsafe'>, update: GuardedUpdate): Promise<boolean> {
  const { set, where, fence } = update
  const fenceColumn = quoteIdent(update.fenceColumn ?? 'fence')
  const setKeys = Object.keys(set)
  const whereKeys = Object.keys(where)
  if (whereKeys.length === 0)
    throw new TypeError('Expected `where` to name the row to write (at least one column)')
  if (typeof fence !== 'bigint')
    throw new TypeError(`Expected \`fence\` to be a bigint (lock.fence), got ${typeof fence}`)
  const params: unknown[] = [
    ...setKeys.map((k) => set[k]),
    ...whereKeys.map((k) => where[k]),
    fence.toString(),
  ]
  const f = `$${params.length}::bigint`
  const assignments = [...setKeys.map((k, i) => `${quoteIdent(k)} = $${i + 1}`), `${fenceColumn} = ${f}`]
  const conditions = whereKeys.map((k, i) => `${quoteIdent(k)} = $${setKeys.length + i + 1}`)
  const table = update.table.split('.').map(quoteIdent).join('.')
  const text =
    `UPDATE ${table} SET ${assignments.join(', ')} WHERE ${conditions.join(' AND ')} ` +
    `AND (${fenceColumn} IS NULL OR ${fenceColumn} <= ${f}) RETURNING 1`
  const rows = await sql.unsafe(text, params as never[])
  return rows.length > 0
}
