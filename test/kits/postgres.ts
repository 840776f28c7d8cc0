/**
 * The PostgreSQL backend's kit: one PostgreSQL 15 server, the lock table in the default schema. A lease
 * is broken through the backend's own `expireStatement` (its lease ended on the server's clock, the fence
 * kept), as a premature expiry would.
 */
import postgres from 'postgres'
import { DEFAULT_SCHEMA, DEFAULT_TABLE, expireStatement } from '../../src/backends/postgres/layout.js'
import { type PostgresServer, startPostgres } from '../servers/postgres.js'
import { type Kit, type KitStore, RACE, ttlStore } from './kit.js'

/** Runs one statement on `server` as the superuser, on a connection of its own. */
export async function adminQuery<T = Record<string, unknown>>(
  server: PostgresServer,
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
      await adminQuery(server, expireStatement({ schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }), [key])
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

export const postgresKit: Kit = {
  id: 'postgres',
  backend: 'postgres',
  title: 'postgres',
  entry: 'postgres',
  networked: true,
  // Fences live in a committed row: they survive a restart and a crash (fsync off loses only a power cut).
  capabilities: ttlStore({ durableFences: true }),
  lacks: { fifo: RACE, session: 'leases end by expires_at on the server clock, no session' },
  start: async () => postgresStore(await startPostgres()),
  chaos: [{ name: 'postgres', features: ['crash', 'durable', 'expire'] }],
  bench: [{ name: 'fencelock postgres', store: 'postgres' }],
}
