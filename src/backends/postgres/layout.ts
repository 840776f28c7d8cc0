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
 * The elections table beside a lock table (src/engines/sql-election.ts): `<table>_elections` in the
 * table's schema, or a hash of the table's name when that is longer than a PostgreSQL identifier. Its
 * fence sequence, advisory class and channel follow from its name, as the lock table's do.
 */
export function electionsTable(t: PgTable): PgTable {
  return besideTable(t, 'elections')
}

/** A table beside the lock table: `<table>_<suffix>`, or a hash of the table's name when that is too long. */
function besideTable(t: PgTable, suffix: string): PgTable {
  const plain = `${t.table}_${suffix}`
  if (Buffer.byteLength(plain) <= MAX_IDENTIFIER_BYTES) return { schema: t.schema, table: plain }
  const hash = createHash('sha256').update(t.table).digest('hex').slice(0, 40)
  return { schema: t.schema, table: `fencelock_${suffix}_${hash}` }
}

/**
 * The semaphores table beside a lock table (src/engines/sql/semaphore.ts): `<table>_semaphores`, one row
 * per semaphore in use (its limit, its latest sequence); its sequence source (`fenceSequence` of it) and
 * its channel follow from its name. The permits table beside it: `permitsTable`.
 */
export function semaphoresTable(t: PgTable): PgTable {
  return besideTable(t, 'semaphores')
}

/** The permits table beside a lock table: `<table>_permits`, one row per grant or place in line. */
export function permitsTable(t: PgTable): PgTable {
  return besideTable(t, 'permits')
}

/**
 * The two semaphore tables. `semaphores`: `name`, the stored `permit_limit`, the `last_sequence` granted;
 * deleted when idle. `permits`: per (name, owner) a grant (`granted`, its `sequence`, the lease's end
 * `expires_at` on the server's clock) or a place in line (its arrival order as `sequence`, the time its
 * place lapses as `expires_at`). No foreign key: a permits row is only ever written under its semaphore
 * row's lock, and housekeeping deletes both.
 */
export function semaphoreTablesDdl(t: PgTable): string {
  return [
    `CREATE TABLE IF NOT EXISTS ${qualified(semaphoresTable(t))} (`,
    '  name          text    PRIMARY KEY,',
    '  permit_limit  integer NOT NULL,',
    '  last_sequence bigint  NOT NULL',
    `);\nCREATE TABLE IF NOT EXISTS ${qualified(permitsTable(t))} (`,
    '  name       text        NOT NULL,',
    '  owner      text        NOT NULL,',
    '  permits    integer     NOT NULL,',
    '  granted    boolean     NOT NULL,',
    '  sequence   bigint      NOT NULL,',
    '  expires_at timestamptz NOT NULL,',
    '  holder     text,',
    '  PRIMARY KEY (name, owner)',
    ')',
  ].join('\n')
}

/** The DDL of the semaphore tables and of their sequence source, for migrations, errors and `doctor`. */
export function semaphoreDdl(t: PgTable): string {
  return `${semaphoreTablesDdl(t)};\n${sequenceDdl(semaphoresTable(t), 'last_sequence')};`
}

/**
 * The rwlocks table beside a lock table (src/engines/sql/rwlock.ts): `<table>_rwlocks`, one row per
 * read-write lock in use (its latest fence, its read epoch); its sequence source (`fenceSequence` of it) and
 * its channel follow from its name. The entries table beside it: `rwEntriesTable`.
 */
export function rwlocksTable(t: PgTable): PgTable {
  return besideTable(t, 'rwlocks')
}

/** The entries table beside a lock table: `<table>_rwlock_entries`, one row per reader or writer in line. */
export function rwEntriesTable(t: PgTable): PgTable {
  return besideTable(t, 'rwlock_entries')
}

/**
 * The two read-write lock tables. `rwlocks`: `name`, the `last_fence` granted, the read `epoch`; deleted
 * when idle. `rwlock_entries`: per (name, owner) a reader or a writer (`mode`), its arrival order
 * (`place`), its `fence` once granted (NULL while it waits), and its end `expires_at` on the server's clock
 * (the lease's, or the place's). No foreign key: an entry is only ever written under its rwlocks row's lock.
 */
export function rwlockTablesDdl(t: PgTable): string {
  return [
    `CREATE TABLE IF NOT EXISTS ${qualified(rwlocksTable(t))} (`,
    '  name       text   PRIMARY KEY,',
    '  last_fence bigint NOT NULL,',
    '  epoch      bigint NOT NULL',
    `);\nCREATE TABLE IF NOT EXISTS ${qualified(rwEntriesTable(t))} (`,
    '  name       text        NOT NULL,',
    '  owner      text        NOT NULL,',
    "  mode       text        NOT NULL CHECK (mode IN ('read', 'write')),",
    '  place      bigint      NOT NULL,',
    '  fence      bigint,',
    '  expires_at timestamptz NOT NULL,',
    '  holder     text,',
    '  PRIMARY KEY (name, owner)',
    ')',
  ].join('\n')
}

/** The DDL of the read-write lock tables and of their sequence source, for migrations, errors and `doctor`. */
export function rwlockDdl(t: PgTable): string {
  return `${rwlockTablesDdl(t)};\n${sequenceDdl(rwlocksTable(t), 'last_fence')};`
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
 * An elections table (`election`) has one more column: `value`, the leader's (at most 1 KiB of UTF-8).
 */
export function tableDdl(t: PgTable, election = false): string {
  return [
    `CREATE TABLE IF NOT EXISTS ${qualified(t)} (`,
    '  name       text        PRIMARY KEY,',
    '  owner      text        NOT NULL,',
    '  fence      bigint      NOT NULL,',
    '  expires_at timestamptz NOT NULL,',
    '  released   boolean     NOT NULL DEFAULT false,',
    `  holder     text${election ? ',' : ''}`,
    ...(election ? ["  value      text        NOT NULL DEFAULT ''"] : []),
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
export function sequenceDdl(t: PgTable, column = 'fence'): string {
  const seq = qualified(fenceSequence(t))
  return [
    `CREATE SEQUENCE ${seq} AS bigint CACHE 1 NO CYCLE;`,
    `SELECT pg_catalog.setval(${regclassLiteral(seq)}, GREATEST(`,
    `  (SELECT pg_catalog.max(${column}) FROM ${qualified(t)}),`,
    `  (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::bigint))`,
  ].join('\n')
}

/** The DDL of the table and of its fence sequence, for migrations, errors and `doctor`. */
export function ddl(t: PgTable, election = false): string {
  return `${tableDdl(t, election)};\n${sequenceDdl(t)};`
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
