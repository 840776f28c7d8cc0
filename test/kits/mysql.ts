/**
 * The MySQL/MariaDB backend's kits, on a real MariaDB 10.11: its defaults, and two other server-wide
 * `sql_mode`s. A lease is broken by ending its row's lease on the server (`expires_at` in the past, the row
 * and its fence kept), as a premature expiry would; lock state is deleted by DELETE or TRUNCATE. InnoDB
 * commits every grant, so fences survive a crash of the server.
 */
import { createConnection } from 'mysql2/promise'
import { DEFAULT_TABLE, quoteTable } from '../../src/backends/mysql/layout.js'
import { MARIADB_DATABASE, type MariaDbServer, startMariaDb } from '../servers/mariadb.js'
import { type Kit, type KitStore, RACE, ttlStore } from './kit.js'

/** Runs one statement on the server on `port` as root, in the tests' database. */
export async function mariaDbQuery(port: number, sql: string, params: unknown[] = []): Promise<unknown> {
  const connection = await createConnection({
    host: '127.0.0.1',
    port,
    user: 'root',
    database: MARIADB_DATABASE,
  })
  try {
    // Committed at once, whatever the server's default (a kit may start it with autocommit off).
    await connection.query('SET SESSION autocommit = 1')
    const [result] = await connection.query(sql, params)
    return result
  } finally {
    connection.destroy()
  }
}

/** Ends the lease of `key` behind its holder's back: its lease ended an hour ago on the server's clock. */
export async function expireRow(port: number, key: string, table = DEFAULT_TABLE): Promise<void> {
  await mariaDbQuery(
    port,
    `UPDATE ${quoteTable(table, 'in a test')} SET expires_at = expires_at - 3600000000 WHERE lock_key = ?`,
    [key],
  )
}

/**
 * Deletes lock state as an operator would: `key`'s row (DELETE), or with no key every row (TRUNCATE, which
 * drops and recreates the table's data).
 */
export async function deleteState(port: number, key?: string, table = DEFAULT_TABLE): Promise<void> {
  const quoted = quoteTable(table, 'in a test')
  if (key === undefined) await mariaDbQuery(port, `TRUNCATE TABLE ${quoted}`)
  else await mariaDbQuery(port, `DELETE FROM ${quoted} WHERE lock_key = ?`, [key])
}

function mysqlStore(server: MariaDbServer): KitStore {
  const crash = async () => {
    server.signal('SIGKILL')
    await server.restart()
  }
  return {
    url: (query = '') => `${server.url}${query}`,
    ports: [server.port],
    urlVia: ([port], query = '') => `mysql://root@127.0.0.1:${port}/${MARIADB_DATABASE}${query}`,
    breakLease: (key) => expireRow(server.port, key),
    deleteState: (key) => deleteState(server.port, key),
    crash,
    restart: crash,
    pause: () => {
      server.signal('SIGSTOP')
      return () => server.signal('SIGCONT')
    },
    logs: () => ({ mariadb: server.log() }),
    recoveryMs: 5000,
    close: () => server.destroy(),
  }
}

const capabilities = ttlStore({ durableFences: true })
const lacks = { fifo: RACE, session: 'leases end by SYSDATE(6) on the server, no session' }

export const mysqlKit: Kit = {
  id: 'mysql',
  backend: 'mysql',
  title: 'mysql (MariaDB 10.11)',
  entry: 'mysql/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'multikey-atomic', 'resume', 'rwlock'],
  networked: true,
  capabilities,
  lacks,
  start: async () => mysqlStore(await startMariaDb()),
  chaos: [{ name: 'mysql', features: ['crash', 'durable', 'expire', 'delete-state'] }],
  bench: [
    { name: 'fencelock mysql', store: 'mysql' },
    // The same backend without its doorbell: waiters poll (what the doorbell is measured against).
    { name: 'fencelock mysql (poll)', store: 'mysql', query: '?doorbell=false' },
  ],
}

/**
 * Server-wide session defaults other than MariaDB's (`sql_mode`, autocommit, isolation), for every session
 * that does not set its own: the lock statements must not depend on them.
 */
const settingsKit = (id: string, settings: string[], chaos: boolean): Kit => ({
  id,
  backend: 'mysql',
  title: `mysql (MariaDB 10.11, ${settings.join(' ')})`,
  entry: 'mysql/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'multikey-atomic', 'resume', 'rwlock'],
  networked: true,
  capabilities,
  lacks,
  start: async () => mysqlStore(await startMariaDb({ args: settings })),
  ...(chaos
    ? { chaos: [{ name: id, features: ['crash', 'durable', 'expire', 'delete-state'] as const }] }
    : {}),
})

/**
 * MariaDB's Oracle mode (its parser, SIMULTANEOUS_ASSIGNMENT, ANSI_QUOTES, PIPES_AS_CONCAT…), strict, and
 * every transaction SERIALIZABLE.
 */
export const mysqlOracleKit = settingsKit(
  'mysql-oracle',
  ['--sql-mode=ORACLE,STRICT_ALL_TABLES', '--transaction-isolation=SERIALIZABLE'],
  true,
)
/**
 * ANSI (ANSI_QUOTES, PIPES_AS_CONCAT, IGNORE_SPACE…) with SIMULTANEOUS_ASSIGNMENT and no backslash escapes,
 * not strict, and autocommit off (a session's statements stay in an open transaction until it commits).
 */
export const mysqlAnsiKit = settingsKit(
  'mysql-ansi',
  ['--sql-mode=ANSI,SIMULTANEOUS_ASSIGNMENT,NO_BACKSLASH_ESCAPES', '--autocommit=0'],
  false,
)
