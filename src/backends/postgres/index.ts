/**
 * The PostgreSQL backend: the sql-lease engine (src/engines/sql/engine.ts) over one lease row per lock,
 * each primitive one statement on the server's clock, through the user's `postgres` (porsager) instance.
 *
 * - Layout: a table (default `public.fencelock_locks`, created on first use unless `createTable` is off)
 *   with one row per lock held or recently held: `name` (the key as is, text primary key), `owner`,
 *   `fence` (bigint), `expires_at` (timestamptz, server clock), `released`, `holder`; and beside it the
 *   fence sequence `<table>_fence` (layout.ts has the DDL of both). A release deletes its row; a row whose
 *   lease ended over a minute ago (a crashed holder's) is deleted by a later grant's housekeeping.
 * - Expiry: the server's `clock_timestamp()` decides, inside the statement that takes a row over
 *   (`now()` is frozen for a whole transaction). Client clocks never matter; the holder counts its
 *   validity on its own monotonic clock from before the statement was sent.
 * - Fence: a new grant's fence is the larger of the row's fence + 1 and the sequence's next value;
 *   renewals keep it, and a deleted row leaves nothing to keep. The sequence is not the table's (a DELETE, a TRUNCATE or the table
 *   dropped leave it), never goes back (nextval is not rolled back) and is made past every fence its table
 *   holds and past the server's clock in microseconds, so one made again after it was dropped starts past
 *   its predecessor's fences too. As durable as the server's commits.
 * - Session settings: each statement pins READ COMMITTED, READ WRITE for its own transaction, in the same
 *   message (adapter.ts); nothing else of the session (time zone, date and interval styles, search_path,
 *   float digits, string escapes) changes what it does.
 * - Waiting: the release statement notifies the key (`pg_notify` in the same statement, sent at commit)
 *   on the table's channel; each client LISTENs on one dedicated connection (postgres.js's own, which
 *   re-subscribes after a reconnect; waiters re-check then), and a notification wakes one waiter of the
 *   key in the client (src/engines/sql/wait.ts). A crashed holder's lease ends unnotified:
 *   waiters re-check at its end. Behind a transaction-pooling proxy (PgBouncer) LISTEN does not deliver:
 *   the engine detects it (a probe notification that never comes back) and waiters poll once a second.
 * - List and break: `list` pages through the held rows by name under the "C" collation (byte order,
 *   whatever the column's); `break` is the release statement (notification included) conditioned on
 *   the owner and fence it read.
 * - Elections (src/engines/sql/election.ts): the same engine over `<table>_elections` beside the lock table
 *   (its columns plus `value`, its own fence sequence and channel); grants and proclaims notify too, so
 *   observers wake at every change.
 * - Semaphores (src/engines/sql/semaphore.ts, semaphore.ts): `<table>_semaphores` (a row per semaphore in
 *   use: its limit, its latest sequence) and `<table>_permits` (a row per grant or place in line), their
 *   sequence source `<table>_semaphores_fence` and their own channel; each acquire one transaction that
 *   locks the semaphore's row. Lock names and semaphore names never meet; list and break see locks only.
 * - Read-write locks (src/engines/sql/rwlock.ts, rwlock.ts): `<table>_rwlocks` (a row per lock in use: its
 *   latest fence, its read epoch) and `<table>_rwlock_entries` (a row per reader or writer in line), their
 *   sequence source `<table>_rwlocks_fence` and their own channel; each acquire one transaction that locks
 *   the name's row, each downgrade one statement.
 * - Limits: keys up to 2048 bytes of UTF-8 without NUL (a text primary key), leases up to 2^43 ms. A
 *   failover to an asynchronous standby can lose the latest grants and fences (doctor reports the
 *   standbys it sees). A server clock stepped forward ends leases early. A client running when its
 *   table is dropped fails one acquire (naming it); the engine then checks the table again.
 *
 * Files: adapter.ts (the engine's adapter), semaphore.ts (the semaphore's adapter), rwlock.ts (the
 * read-write lock's), statements.ts (the SQL), literals.ts (values in it), layout.ts (table, sequence, DDL, channel), notify.ts (LISTEN, delivery
 * proven), faults.ts (errors in words, which ones waiting can help), doctor.ts (version, settings,
 * replication, sequence), client.ts (the client methods used). The fence guard for a protected row lives
 * in src/guards/postgres.ts (`fencelock/guards/postgres`), re-exported here.
 */
import type { LockBackend } from '../../core/backend.js'
import { loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { sqlLeaseBackend } from '../../engines/sql/backend.js'
import { PostgresAdapter } from './adapter.js'
import { isPgSql, type PgSql } from './client.js'
import { checkIdentifier, DEFAULT_SCHEMA, DEFAULT_TABLE, electionsTable, type PgTable } from './layout.js'
import { PostgresRwLockAdapter } from './rwlock.js'
import { PostgresSemaphoreAdapter } from './semaphore.js'

export { type GuardedUpdate, guardedUpdate } from '../../guards/postgres.js'
export { POSTGRES_LIMITS, PostgresAdapter } from './adapter.js'
export {
  channelOf,
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  ddl,
  electionsTable,
  expireStatement,
  fenceSequence,
  qualified,
} from './layout.js'

/** What `postgresBackend` is told. */
export interface PostgresBackendOptions {
  /** Your `postgres` (porsager, 3.4.x) instance: `postgres(url, options)`. fencelock never ends it. */
  readonly sql: PgSql
  /** The lock table. @default 'fencelock_locks' */
  readonly table?: string | undefined
  /** The table's schema. @default 'public' */
  readonly schema?: string | undefined
  /** Create the table on first use when it does not exist. @default true */
  readonly createTable?: boolean | undefined
  /** Names the store in errors. @default `postgres://<host>:<port>/<database>` */
  readonly id?: string | undefined
}

const PKG = 'postgres'

/**
 * Creates a PostgreSQL backend over your `postgres` instance.
 * @example
 * import postgres from 'postgres'
 * const locks = createLockClient(postgresBackend({ sql: postgres('postgres://app@db.internal/app') }))
 */
export function postgresBackend(options: PostgresBackendOptions): LockBackend {
  const { sql } = options
  if (!isPgSql(sql)) {
    throw new TypeError('Expected `sql` to be an instance of the postgres package: postgres(url, options)')
  }
  const table = {
    schema: checkIdentifier(options.schema ?? DEFAULT_SCHEMA, 'schema'),
    table: checkIdentifier(options.table ?? DEFAULT_TABLE, 'table'),
  }
  const o = sql.options as
    | { host?: readonly string[]; port?: readonly number[]; database?: string }
    | undefined
  const id =
    options.id ?? `postgres://${o?.host?.[0] ?? 'localhost'}:${o?.port?.[0] ?? 5432}/${o?.database ?? ''}`
  const createTable = options.createTable ?? true
  return backendOf({ sql, table, id, owned: false, createTable }, { createTable })
}

/**
 * The mutex over the lock table, elections over the elections table beside it (`electionsTable`), and
 * semaphores over the semaphore tables (semaphore.ts), read-write locks over theirs (rwlock.ts): one engine each, on the same client, which only the
 * mutex's adapter ends.
 */
function backendOf(
  settings: { sql: PgSql; table: PgTable; id: string; owned: boolean; createTable: boolean },
  options: { createTable: boolean; id?: string },
): LockBackend {
  const mutex = new PostgresAdapter(settings)
  const elections = new PostgresAdapter({
    ...settings,
    table: electionsTable(settings.table),
    owned: false,
    election: true,
  })
  const semaphores = new PostgresSemaphoreAdapter(settings)
  const rwlocks = new PostgresRwLockAdapter(settings)
  return sqlLeaseBackend(
    mutex,
    options,
    { adapter: elections, options },
    { adapter: semaphores, options },
    { adapter: rwlocks, options },
  )
}

/** The URL parameters of `postgres://` (tested against its page in docs/backends/, like every backend's). */
export const PARAMS = {
  table: { type: 'string', default: DEFAULT_TABLE, doc: 'the lock table' },
  schema: { type: 'string', default: DEFAULT_SCHEMA, doc: "the lock table's schema" },
  createTable: {
    type: 'bool',
    default: true,
    doc: 'create the table on first use when it does not exist (false: a missing table is an error giving its DDL)',
  },
  sslmode: {
    type: 'enum',
    values: ['disable', 'prefer', 'require', 'verify-full'],
    doc: "TLS, as libpq's sslmode (default: the postgres package's, no TLS)",
  },
} as const satisfies ParamSchema

/**
 * `postgres://user:pass@host:port/db?table=&schema=&createTable=&sslmode=` (also `postgresql://`): a
 * postgres.js instance of its own (ended on close), a dedicated listening connection included.
 */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const mod = await loadDriver(PKG, 'postgres', url, () => import('postgres'))
  const params = readParams(url, PARAMS)
  const table = {
    schema: checkIdentifier(params.schema, 'schema'),
    table: checkIdentifier(params.table, 'table'),
  }
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''))
  if (database.includes('/'))
    throw new TypeError(`Expected postgres://HOST:PORT/DATABASE, got ${redact(url)}`)
  const sql = mod.default({
    host: url.hostname.replace(/^\[|\]$/g, '') || 'localhost',
    port: url.port ? Number(url.port) : 5432,
    ...(database ? { database } : {}),
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    ...(params.sslmode === undefined || params.sslmode === 'disable'
      ? {}
      : { ssl: params.sslmode as 'prefer' | 'require' | 'verify-full' }),
    // No NOTICE lines on the console (CREATE TABLE IF NOT EXISTS of an existing table says one).
    onnotice: () => {},
    // No array types read on each new connection (no statement here uses arrays): postgres.js reads them in
    // a promise nobody awaits, so a connection terminated during the read (a restart, pg_terminate_backend)
    // was an unhandled rejection, which ends a Node process.
    fetch_types: false,
    connect_timeout: 10,
  })
  const id = redact(url)
  const createTable = params.createTable
  return backendOf({ sql, table, id, owned: true, createTable }, { createTable, id })
}
