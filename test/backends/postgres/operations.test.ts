/**
 * `list` and `break` on PostgreSQL 15 (test/backends/sql/operation-cases.ts), on a lock table whose key
 * column has a linguistic collation (ICU's root locale, as a database made with `en_US.UTF-8` would have
 * a libc one): list must still read prefixes and pages in byte order.
 */
import { after, before, describe } from 'node:test'
import postgres from 'postgres'
import { PostgresAdapter } from '../../../src/backends/postgres/index.js'
import { expireStatement, qualified, tableDdl } from '../../../src/backends/postgres/layout.js'
import { sqlLeaseBackend } from '../../../src/engines/sql/backend.js'
import { adminQuery } from '../../kits/postgres.js'
import { type PostgresServer, startPostgres } from '../../servers/postgres.js'
import { operationTests } from '../sql/operation-cases.js'

const TABLE = { schema: 'public', table: 'ops_locks' }

describe('postgres: list and break', { timeout: 240_000 }, () => {
  let server: PostgresServer
  before(async () => {
    server = await startPostgres()
    // The library's DDL, its key column under a collation that does not order by bytes.
    const collation = await adminQuery<{ name: string }>(
      server,
      "SELECT collname AS name FROM pg_catalog.pg_collation WHERE collname IN ('und-x-icu', 'en_US.utf8', 'en_US') ORDER BY collname DESC LIMIT 1",
    )
    const name = collation[0]?.name
    if (name === undefined)
      throw new Error('no linguistic collation (und-x-icu, en_US.utf8) on the test server')
    const ddl = tableDdl(TABLE).replace('name       text ', `name       text COLLATE "${name}" `)
    await adminQuery(server, ddl)
  })
  after(async () => server?.destroy())

  operationTests(() => ({
    url: () => server.url('?table=ops_locks'),
    backend(options) {
      const sql = postgres(server.url(), { onnotice: () => {} })
      const dialect = new PostgresAdapter({
        sql,
        table: TABLE,
        id: 'postgres-ops',
        owned: true,
        createTable: true,
      })
      return { backend: sqlLeaseBackend(dialect, options), dialect }
    },
    expire: async (key) => {
      await adminQuery(server, expireStatement(TABLE), [key])
    },
    row: async (key) => {
      const rows = await adminQuery<{ released: boolean; fence: string }>(
        server,
        `SELECT released, fence::text AS fence FROM ${qualified(TABLE)} WHERE name = $1`,
        [key],
      )
      return rows[0] === undefined ? undefined : { released: rows[0].released, fence: BigInt(rows[0].fence) }
    },
  }))
})
