/**
 * The names of a MySQL/MariaDB lock: its table, its row and its doorbell (a named lock of `GET_LOCK`).
 * The tests break leases through these helpers; nobody copies a name format.
 */
import { createHash } from 'node:crypto'

/** The table when the URL or the options name none. */
export const DEFAULT_TABLE = 'fencelock_locks'

/** Table names we accept: an identifier, optionally qualified by its database (`db.locks`). */
const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_$]{0,63}(\.[A-Za-z_][A-Za-z0-9_$]{0,63})?$/

/** `name` as a quoted identifier (`db`.`table`), after checking it is a plain one (no quoting games). */
export function quoteTable(name: string, where: string): string {
  if (!TABLE_NAME.test(name)) {
    throw new TypeError(
      `Expected a table name (letters, digits, "_" or "$", at most 64 of them, optionally "database.table") ${where}, got ${JSON.stringify(name)}`,
    )
  }
  return name
    .split('.')
    .map((part) => `\`${part}\``)
    .join('.')
}

/**
 * The elections table beside a lock table (src/engines/sql-election.ts), unquoted, in the same database:
 * `<table>_elections`, or a hash of the table's name when that is longer than a MySQL identifier (64).
 */
export function electionsTableName(name: string): string {
  const [database, table] = name.includes('.') ? name.split('.') : [undefined, name]
  const plain = `${table}_elections`
  const own =
    plain.length <= 64
      ? plain
      : `fencelock_elections_${createHash('sha256').update(table!).digest('hex').slice(0, 40)}`
  return database === undefined ? own : `${database}.${own}`
}

/**
 * The semaphore tables beside a lock table (src/engines/sql/semaphore.ts), in the same database:
 * `<table>_semaphores` and `<table>_permits` (or a hash of the table's name when too long), quoted, and
 * as information_schema spells them.
 */
export function semaphoreTableNames(name: string) {
  return { semaphores: besideTable(name, 'semaphores'), permits: besideTable(name, 'permits') }
}

/**
 * The read-write lock tables beside a lock table (src/engines/sql/rwlock.ts), in the same database:
 * `<table>_rwlocks` and `<table>_rwlock_entries` (or a hash of the table's name when too long), quoted,
 * and as information_schema spells them.
 */
export function rwlockTableNames(name: string) {
  return { rwlocks: besideTable(name, 'rwlocks'), entries: besideTable(name, 'rwlock_entries') }
}

/** `<table>_<suffix>` in the lock table's database, quoted and as information_schema spells it. */
function besideTable(name: string, suffix: string) {
  const [database, table] = name.includes('.') ? name.split('.') : [undefined, name]
  const plain = `${table}_${suffix}`
  const own =
    plain.length <= 64
      ? plain
      : `fencelock_${suffix}_${createHash('sha256').update(table!).digest('hex').slice(0, 40)}`
  const full = database === undefined ? own : `${database}.${own}`
  return { quoted: quoteTable(full, 'as `table`'), parts: [database ?? null, own] as const }
}

/**
 * The longest semaphore name: the permits table's primary key is the name and the owner (64 ASCII bytes),
 * within InnoDB's longest index key (3072 bytes).
 */
export const MAX_SEMAPHORE_KEY_BYTES = 3000

/**
 * The semaphore tables. `semaphores`: the name's UTF-8 bytes, the stored `permit_limit`, the
 * `last_sequence` granted; deleted when idle. `permits`: per (name, owner) a grant (`granted` 1, its
 * `sequence`, the lease's end `expires_at` in µs on the server's clock) or a place in line (its arrival
 * order as `sequence`, the time its place lapses as `expires_at`).
 */
export function semaphoreTablesDdl(semaphores: string, permits: string): string[] {
  return [
    [
      `CREATE TABLE IF NOT EXISTS ${semaphores} (`,
      `  sem_key VARBINARY(${MAX_SEMAPHORE_KEY_BYTES}) NOT NULL,`,
      '  permit_limit INT NOT NULL,',
      '  last_sequence BIGINT NOT NULL,',
      '  PRIMARY KEY (sem_key)',
      ') ENGINE=InnoDB',
    ].join('\n'),
    [
      `CREATE TABLE IF NOT EXISTS ${permits} (`,
      `  sem_key VARBINARY(${MAX_SEMAPHORE_KEY_BYTES}) NOT NULL,`,
      '  owner VARCHAR(64) CHARACTER SET ascii NOT NULL,',
      '  permits INT NOT NULL,',
      '  granted TINYINT NOT NULL,',
      '  sequence BIGINT NOT NULL,',
      '  expires_at BIGINT NOT NULL,',
      '  holder VARCHAR(256) CHARACTER SET utf8mb4 NULL,',
      '  PRIMARY KEY (sem_key, owner)',
      ') ENGINE=InnoDB',
    ].join('\n'),
  ]
}

/**
 * The read-write lock tables. `rwlocks`: the name's UTF-8 bytes, the `last_fence` granted, the read
 * `epoch`; deleted when idle. `rwlock_entries`: per (name, owner) a reader or a writer (`mode`), its arrival
 * order (`place`), its `fence` once granted (NULL while it waits), its end `expires_at` in µs on the
 * server's clock (the lease's, or the place's). Names up to `MAX_SEMAPHORE_KEY_BYTES`, for the same reason.
 */
export function rwlockTablesDdl(rwlocks: string, entries: string): string[] {
  return [
    [
      `CREATE TABLE IF NOT EXISTS ${rwlocks} (`,
      `  rw_key VARBINARY(${MAX_SEMAPHORE_KEY_BYTES}) NOT NULL,`,
      '  last_fence BIGINT NOT NULL,',
      '  epoch BIGINT NOT NULL,',
      '  PRIMARY KEY (rw_key)',
      ') ENGINE=InnoDB',
    ].join('\n'),
    [
      `CREATE TABLE IF NOT EXISTS ${entries} (`,
      `  rw_key VARBINARY(${MAX_SEMAPHORE_KEY_BYTES}) NOT NULL,`,
      '  owner VARCHAR(64) CHARACTER SET ascii NOT NULL,',
      '  mode VARCHAR(5) CHARACTER SET ascii NOT NULL,',
      '  place BIGINT NOT NULL,',
      '  fence BIGINT NULL,',
      '  expires_at BIGINT NOT NULL,',
      '  holder VARCHAR(256) CHARACTER SET utf8mb4 NULL,',
      '  PRIMARY KEY (rw_key, owner)',
      ') ENGINE=InnoDB',
    ].join('\n'),
  ]
}

/** The longest key: the primary key column is VARBINARY(3072), InnoDB's longest index key. */
export const MAX_KEY_BYTES = 3072

/**
 * The table: one row per lock held or recently held (statements.ts retires rows ended long ago).
 * `lock_key` is the key's UTF-8 bytes as is (binary, so names differing only in case stay distinct);
 * `expires_at` is the lease's end (or the release's time) in microseconds since the epoch on the server's
 * clock; `released` 1 marks a released row (free at once, whatever the clock does next). An elections table
 * (`election`) has one more column: `value`, the leader's UTF-8 bytes (at most 1 KiB, binary like the key).
 */
export function tableDdl(table: string, election = false): string {
  return [
    `CREATE TABLE IF NOT EXISTS ${table} (`,
    `  lock_key VARBINARY(${MAX_KEY_BYTES}) NOT NULL,`,
    '  owner VARCHAR(64) CHARACTER SET ascii NOT NULL,',
    '  fence BIGINT NOT NULL,',
    '  expires_at BIGINT NOT NULL,',
    '  released TINYINT NOT NULL,',
    '  holder VARCHAR(256) CHARACTER SET utf8mb4 NULL,',
    ...(election ? ["  value VARBINARY(1024) NOT NULL DEFAULT '',"] : []),
    '  PRIMARY KEY (lock_key)',
    ') ENGINE=InnoDB',
  ].join('\n')
}

/**
 * The doorbell of a lock: the name of the `GET_LOCK` its holder keeps while it holds the lease, that
 * waiters block on. Names are at most 64 characters and server-wide, so: a hash of the database (the one
 * the table lives in: two databases on one server have distinct bells), the table and the key.
 */
export function doorbellName(database: string, table: string, key: string): string {
  return `fencelock:${createHash('sha1').update(`${database}\0${table}\0${key}`).digest('hex')}`
}
