/**
 * The guarded UPDATE both SQL guards run (postgres.ts, mysql.ts), built for a dialect:
 *
 *   UPDATE <table> SET <columns…>, fence = <f> WHERE <key columns…> AND (fence IS NULL OR fence <= <f>)
 *
 * - `IS NULL OR`: a fence column just added holds NULL, and `NULL <= f` is not true, so without it the
 *   first write after adding the column would be refused, and every one after it.
 * - `<=`, not `<`: the same holder may write several times with its one fence; a later holder's fence is
 *   strictly greater, so once it has written, every earlier holder's write matches no row.
 * - `<f>` is the fence cast to a 64-bit integer on the server: by MySQL's documented rule a string
 *   compared with a number is compared as doubles, and fences above 2^53 that differ by one are equal
 *   as doubles. The cast makes the comparison exact whatever the server does with strings.
 * The check and the write are one statement on one row, so no other write comes between them.
 */
import { fenceDigits } from './fence-value.js'

/** One guarded write to one row of a SQL table. */
export interface GuardedUpdate {
  /** The protected table, `table` or `schema.table` (each part taken literally, quoted). */
  readonly table: string
  /** The columns to write and their values (passed to the driver as parameters). */
  readonly set: Readonly<Record<string, unknown>>
  /** Which row: column = value for each entry (AND). */
  readonly where: Readonly<Record<string, unknown>>
  /** The lock's fence (`lock.fence`). */
  readonly fence: bigint
  /** The row's fence column (a 64-bit integer, NULL before the first guarded write). @default 'fence' */
  readonly fenceColumn?: string | undefined
}

/** How a dialect spells what differs: identifiers, the n-th parameter (from 1), the fence as a bigint. */
export interface SqlGuardDialect {
  readonly name: string
  quote(identifier: string): string
  parameter(n: number): string
  bigint(parameter: string): string
}

/** The statement text and its parameters (the set values, the fence's digits, the where values, the digits). */
export function guardedUpdateStatement(
  update: GuardedUpdate,
  dialect: SqlGuardDialect,
): { text: string; params: unknown[] } {
  const { set, where } = update
  const fence = fenceDigits(update.fence, `for guardedUpdate on ${dialect.name}`)
  const setKeys = Object.keys(set)
  const whereKeys = Object.keys(where)
  if (whereKeys.length === 0)
    throw new TypeError(
      `Expected \`where\` to name the row to write in ${update.table} (at least one column)`,
    )
  const column = dialect.quote(update.fenceColumn ?? 'fence')
  const table = update.table.split('.').map(dialect.quote).join('.')
  // Parameters in the order they appear in the text (MySQL's `?` are positional), the fence twice.
  const params: unknown[] = []
  const parameter = (value: unknown) => {
    params.push(value)
    return dialect.parameter(params.length)
  }
  const assignments = setKeys.map((k) => `${dialect.quote(k)} = ${parameter(set[k])}`)
  assignments.push(`${column} = ${dialect.bigint(parameter(fence))}`)
  const conditions = whereKeys.map((k) => `${dialect.quote(k)} = ${parameter(where[k])}`)
  conditions.push(`(${column} IS NULL OR ${column} <= ${dialect.bigint(parameter(fence))})`)
  const text = `UPDATE ${table} SET ${assignments.join(', ')} WHERE ${conditions.join(' AND ')}`
  return { text, params }
}
