/**
 * The PostgreSQL backend's kits: one PostgreSQL 15 server, the lock table in the default schema; with
 * its defaults, and with session defaults the statements must not depend on (`postgres-serializable`,
 * `postgres-repeatable-read`). A lease is broken through the backend's own `expireStatement` (its lease
 * ended on the server's clock, the fence kept), as a premature expiry would; lock state is deleted
 * through `deleteStatement`/`truncateStatement`, as an operator's clean-up would.
 */
import postgres from 'postgres'
import {
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  deleteStatement,
  expireStatement,
  truncateStatement,
} from '../../src/backends/postgres/layout.js'
import { type PostgresOptions, type PostgresServer, startPostgres } from '../servers/postgres.js'
import { type Kit, type KitStore, RACE, ttlStore } from './kit.js'

const TABLE = { schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }

/**
 * Session defaults other than PostgreSQL's, every one a statement might lean on: SERIALIZABLE (a contended
 * statement fails with 40001 unless pinned), a time zone with a 45-minute offset and daylight saving,
 * day-first dates, ISO intervals, floats printed with one digit, backslashes in plain strings, and a
 * search_path that puts a decoy schema (a `fencelock_locks` of another shape, a `clock_timestamp()` stuck
 * in 2000: see `decoy`) before pg_catalog.
 */
export const ODD_SETTINGS: Readonly<Record<string, string>> = {
  default_transaction_isolation: 'serializable',
  TimeZone: 'Pacific/Chatham',
  DateStyle: 'SQL, DMY',
  IntervalStyle: 'iso_8601',
  extra_float_digits: '-15',
  standard_conforming_strings: 'off',
  search_path: 'decoy, pg_catalog, public',
}

/** The decoy schema of `ODD_SETTINGS`' search_path: a table named like ours, a clock that never moves. */
async function decoy(server: PostgresServer): Promise<void> {
  await adminQuery(server, 'CREATE SCHEMA decoy')
  await adminQuery(server, 'CREATE TABLE decoy.fencelock_locks (name int PRIMARY KEY)')
  await adminQuery(
    server,
    "CREATE FUNCTION decoy.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT timestamptz '2000-01-01 00:00:00+00' $$",
  )
}

/** Runs one statement on `server` (or a kit's store of it) as the superuser, on a connection of its own. */
export async function adminQuery<T = Record<string, unknown>>(
  server: Pick<PostgresServer, 'url'>,
  text: string,
  params: unknown[] = [],
): Promise<T[]> {
  const sql = postgres(server.url(), { max: 1, onnotice: () => {} })
  try {
    return (await sql.unsafe(text, params as never[])) as unknown as T[]
  } finally {
    await sql.end({ timeout: 1 })
  }
}

function postgresStore(server: PostgresServer): KitStore {
  return {
    url: (query = '') => server.url(query),
    ports: [server.port],
    urlVia: ([port], query = '') => `postgres://postgres@127.0.0.1:${port}/postgres${query}`,
    breakLease: async (key) => {
      await adminQuery(server, expireStatement(TABLE), [key])
    },
    deleteState: async (key) => {
      // Before the first lock there is no table: nothing to delete.
      const found = await adminQuery<{ ok: boolean }>(server, 'SELECT to_regclass($1) IS NOT NULL AS ok', [
        `${DEFAULT_SCHEMA}.${DEFAULT_TABLE}`,
      ])
      if (!found[0]?.ok) return
      if (key === undefined) await adminQuery(server, truncateStatement(TABLE))
      else await adminQuery(server, deleteStatement(TABLE), [key])
    },
    crash: async () => {
      server.signal('SIGKILL')
      await server.restart()
    },
    restart: () => server.restart(),
    pause: () => {
      server.signal('SIGSTOP')
      return () => server.signal('SIGCONT')
    },
    logs: () => ({ postgres: server.log() }),
    recoveryMs: 3000,
    close: () => server.destroy(),
  }
}

/** Starts a server with `options` and the kit's store on it (`prepare`: what it needs before use). */
async function startStore(
  options: PostgresOptions = {},
  prepare?: (server: PostgresServer) => Promise<void>,
): Promise<KitStore> {
  const server = await startPostgres(options)
  try {
    await prepare?.(server)
  } catch (error) {
    await server.destroy()
    throw error
  }
  return postgresStore(server)
}

/** What every PostgreSQL kit shares: the backend, its entry, its capabilities. */
const POSTGRES = {
  backend: 'postgres',
  entry: 'postgres/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'multikey-atomic', 'resume', 'rwlock'],
  networked: true,
  // Fences live in a committed row and a sequence: they survive a restart and a crash (fsync off loses
  // only a power cut).
  capabilities: ttlStore({ durableFences: true }),
  lacks: { fifo: RACE, session: 'leases end by expires_at on the server clock, no session' },
} as const satisfies Partial<Kit>

export const postgresKit: Kit = {
  ...POSTGRES,
  id: 'postgres',
  title: 'postgres',
  start: () => startStore(),
  chaos: [{ name: 'postgres', features: ['crash', 'durable', 'expire', 'delete-state'] }],
  bench: [{ name: 'fencelock postgres', store: 'postgres' }],
}

/** The server's session defaults are `ODD_SETTINGS` (SERIALIZABLE among them). */
export const postgresSerializableKit: Kit = {
  ...POSTGRES,
  id: 'postgres-serializable',
  title: 'postgres (serializable, odd session settings)',
  start: () => startStore({ settings: ODD_SETTINGS }, decoy),
  chaos: [{ name: 'postgres-serializable', features: ['crash', 'durable', 'expire', 'delete-state'] }],
}

/** `default_transaction_isolation = 'repeatable read'` (a contended statement fails with 40001 unless pinned). */
export const postgresRepeatableReadKit: Kit = {
  ...POSTGRES,
  id: 'postgres-repeatable-read',
  title: 'postgres (repeatable read)',
  start: () => startStore({ settings: { default_transaction_isolation: 'repeatable read' } }),
}
