/**
 * `list` and `break` on MariaDB 10.11 (test/backends/sql/operation-cases.ts), with the doorbell: a break
 * rings the broken holder's bell even when that holder never renews again.
 */
import { after, before, describe } from 'node:test'
import { createPool } from 'mysql2/promise'
import { DEFAULT_TABLE, MySqlAdapter, quoteTable } from '../../../src/backends/mysql/index.js'
import { sqlLeaseBackend } from '../../../src/engines/sql/backend.js'
import { expireRow, mariaDbQuery } from '../../kits/mysql.js'
import { MARIADB_DATABASE, type MariaDbServer, startMariaDb } from '../../servers/mariadb.js'
import { operationTests } from '../sql/operation-cases.js'

describe('mysql (MariaDB 10.11): list and break', { timeout: 240_000 }, () => {
  let server: MariaDbServer
  const table = quoteTable(DEFAULT_TABLE, 'in a test')
  before(async () => {
    server = await startMariaDb()
  })
  after(async () => server?.destroy())

  operationTests(() => ({
    url: () => server.url,
    backend(options) {
      const pool = createPool({
        host: '127.0.0.1',
        port: server.port,
        user: 'root',
        database: MARIADB_DATABASE,
        flags: ['-FOUND_ROWS'],
        supportBigNumbers: true,
        bigNumberStrings: true,
      })
      const dialect = new MySqlAdapter({
        pool,
        table,
        tableName: DEFAULT_TABLE,
        bellDatabase: MARIADB_DATABASE,
        id: 'mysql-ops',
        owned: true,
        doorbell: true,
      })
      return { backend: sqlLeaseBackend(dialect, options), dialect }
    },
    expire: (key) => expireRow(server.port, key),
    row: async (key) => {
      const rows = (await mariaDbQuery(
        server.port,
        `SELECT released, CAST(fence AS CHAR) AS fence FROM ${table} WHERE lock_key = ?`,
        [key],
      )) as { released: number; fence: string }[]
      return rows[0] === undefined
        ? undefined
        : { released: rows[0].released === 1, fence: BigInt(rows[0].fence) }
    },
  }))
})
