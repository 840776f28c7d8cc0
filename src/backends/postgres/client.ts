/**
 * What the PostgreSQL backend asks of the user's `postgres` (porsager) instance: only the methods it calls.
 * fencelock never changes its settings and never ends one it was given.
 */
import type { Sql } from 'postgres'

export type PgSql = Pick<Sql, 'unsafe' | 'listen' | 'end' | 'options' | 'begin'>

/** Whether `value` looks like a `postgres()` instance (a function with `unsafe` and `listen`). */
export function isPgSql(value: unknown): value is PgSql {
  const v = value as { unsafe?: unknown; listen?: unknown } | undefined
  return typeof value === 'function' && typeof v?.unsafe === 'function' && typeof v.listen === 'function'
}
