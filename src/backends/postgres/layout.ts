/**
 * The PostgreSQL lock table: its name, its columns, the fence sequence beside it, the DDL that creates
 * both, and the notification channel of its releases. The tests break leases through `expireStatement` and
 * delete state through `deleteStatement`/`truncateStatement`; nobody copies a column or object name.
 */
import { createHash } from 'node:crypto'
import { regclassLiteral } from './literals.js'

/** The lock table when the URL or the options name none. */
export const DEFAULT_TABLE = 'fencelock_locks'
/** The lock table's schema when the URL or the options name none. */
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
 * The fence sequence of a table: `<table>_fence` in the table's schema, or a hash of the table's name when
 * that is longer than a PostgreSQL identifier. Not OWNED BY the table, so that dropping the table (or
 * `TRUNCATE … RESTART IDENTITY`) leaves it, and the fences, where they were.
 */
export function fenceSequence(t: PgTable): PgTable {
  const plain = `${t.table}_fence`
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return { schema: t.schema, table: plain }
  const hash = createHash('sha256').update(t.table).digest('hex').slice(0, 40)
  return { schema: t.schema, table: `fencelock_fence_${hash}` }
}

/**
 * The class (first int4) of the advisory locks the acquire takes per key (the second is the key's
 * `hashtext`): a number of the table's own, so that it meets no application's advisory locks in practice
 * (a collision would only make an acquire wait its turn).
 */
export function advisoryClass(t: PgTable): number {
  return createHash('sha256').update(`fencelock:${t.schema}.${t.table}`).digest().readInt32BE(0)
}

/**
 * The table: one row per lock held or recently held (a release deletes its row; a row whose lease ended
 * long ago is retired). `name` is the lock's key as is (text: keys are compared byte for byte under the
 * database's deterministic collation, so case-only-different keys stay distinct); `expires_at` is on the
 * server's clock. `released` is set only by earlier versions (with an `expires_at` in 1970): such a row is
 * free whatever the server's clock does later. A name's fences only ever grow: the sequence outlives rows.
 */
export function tableDdl(t: PgTable): string {
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
 * The fence sequence, made in ONE implicit transaction with its first value (others see it only once it
 * has that value): past every fence the table holds (a table of an earlier version, whose fences came
 * from its rows alone) and past the server's clock in microseconds since 1970, so that a sequence made
 * again after one was dropped (with or without its table) starts above the fences its predecessor gave,
 * which count one per grant from that predecessor's own creation time. CACHE 1: a session caching values
 * would hand out fences out of time order. Fails with 42P07 when it exists: it is never set back.
 */
export function sequenceDdl(t: PgTable): string {
  const seq = qualified(fenceSequence(t))
  return [
    `CREATE SEQUENCE ${seq} AS bigint CACHE 1 NO CYCLE;`,
    `SELECT pg_catalog.setval(${regclassLiteral(seq)}, GREATEST(`,
    `  (SELECT pg_catalog.max(fence) FROM ${qualified(t)}),`,
    `  (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint))`,
  ].join('\n')
}

/** The DDL of the table and of its fence sequence, for migrations, errors and `doctor`. */
export function ddl(t: PgTable): string {
  return `${tableDdl(t)};\n${sequenceDdl(t)};`
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

/** An operator's clean-up of key `$1`'s row (tests: `KitStore.deleteState`). */
export function deleteStatement(t: PgTable): string {
  return `DELETE FROM ${qualified(t)} WHERE name = $1`
}

/** An operator's clean-up of every row (tests: `KitStore.deleteState()`). */
export function truncateStatement(t: PgTable): string {
  return `TRUNCATE ${qualified(t)}`
}

/** Ends the lease of key `$1` now, as a premature expiry would (tests: `KitStore.breakLease`); the fence stays. */
export function expireStatement(t: PgTable): string {
  return `UPDATE ${qualified(t)} SET expires_at = pg_catalog.clock_timestamp() - interval '1 millisecond' WHERE name = $1`
}
