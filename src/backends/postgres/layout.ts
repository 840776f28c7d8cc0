/**
 * The PostgreSQL lock table: its name, its columns, the DDL that creates it, and the notification channel
 * of its releases. The tests break leases through `expireStatement`; nobody copies a column name.
 */
import { createHash } from 'node:crypto'

export const DEFAULT_TABLE = 'fencelock_locks'
export const DEFAULT_SCHEMA = 'public'

/** PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes: longer names are cut silently by the server. */
const MAX_IDENTIFIER_BYTES = 63

/** An identifier, double-quoted (so that any name, in any case, is taken literally). */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`
}

/** Refuses a table or schema name PostgreSQL would cut or cannot store. */
export function checkIdentifier(name: unknown, what: string): string {
  if (
    typeof name !== 'string' ||
    name === '' ||
    name.includes('\0') ||
    Buffer.byteLength(name) > MAX_IDENTIFIER_BYTES
  ) {
    throw new TypeError(
      `Expected \`${what}\` to be a PostgreSQL name of 1 to ${MAX_IDENTIFIER_BYTES} bytes, got ${JSON.stringify(name)}`,
    )
  }
  return name
}

/** The lock table of a backend. */
export interface PgTable {
  readonly schema: string
  readonly table: string
}

/** `"schema"."table"`. */
export const qualified = (t: PgTable): string => `${quoteIdent(t.schema)}.${quoteIdent(t.table)}`

/**
 * The table: one row per lock name ever used. `name` is the lock's key as is (text: keys are compared
 * byte for byte under the database's deterministic collation, so case-only-different keys stay distinct);
 * `expires_at` is on the server's clock; a released row has `released` and an `expires_at` in 1970, so it
 * is free whatever the server's clock does later. `fence` only ever grows.
 */
export function ddl(t: PgTable): string {
  return [
    `CREATE TABLE IF NOT EXISTS ${qualified(t)} (`,
    '  name       text        PRIMARY KEY,',
    '  owner      text        NOT NULL,',
    '  fence      bigint      NOT NULL,',
    '  expires_at timestamptz NOT NULL,',
    '  released   boolean     NOT NULL DEFAULT false,',
    '  holder     text',
    ')',
  ].join('\n')
}

/**
 * The NOTIFY channel of the table's releases (the payload is the key). `fencelock:<schema>.<table>`, or a
 * hash of it when that is longer than a PostgreSQL identifier (LISTEN would cut it, pg_notify refuses it).
 */
export function channelOf(t: PgTable): string {
  const plain = `fencelock:${t.schema}.${t.table}`
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return plain
  return `fencelock:${createHash('sha256').update(`${t.schema}.${t.table}`).digest('hex').slice(0, 40)}`
}

/** Ends the lease of key `$1` now, as a premature expiry would (tests: `KitStore.breakLease`); the fence stays. */
export function expireStatement(t: PgTable): string {
  return `UPDATE ${qualified(t)} SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE name = $1`
}
