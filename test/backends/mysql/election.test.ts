/**
 * MySQL/MariaDB elections, as the store sees them, on a real MariaDB 10.11: the cases every sql-lease
 * store shares (test/backends/sql/election-cases.ts: the elections table and its rows, a lock and an
 * election of one name apart, a proclaim refused after a takeover, terms past resigns, deletes and retired
 * rows, the DDL when the table may not be made), and no watch (observers read once a second).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { electionsTableName, fromUrl } from '../../../src/backends/mysql/index.js'
import { DEFAULT_TABLE } from '../../../src/backends/mysql/layout.js'
import { deleteState, expireRow, mariaDbQuery, mysqlKit } from '../../kits/mysql.js'
import { suiteStore } from '../../kits/suite-store.js'
import { electionTests } from '../sql/election-cases.js'

const ELECTIONS = electionsTableName(DEFAULT_TABLE)

describe('mysql: elections on the store', { timeout: 240_000 }, () => {
  const { store, client } = suiteStore(mysqlKit, { ttl: '20s' })
  const port = () => Number(new URL(store().url()).port)

  electionTests(() => ({
    url: (query) => store().url(query),
    client,
    async electionRows(name) {
      const rows = (await mariaDbQuery(
        port(),
        `SELECT owner, CAST(fence AS CHAR) AS fence, value FROM ${ELECTIONS} WHERE lock_key = ?`,
        [name],
      )) as { owner: string; fence: string; value: Buffer }[]
      return rows.map((row) => ({ ...row, value: Buffer.from(row.value).toString('utf8') }))
    },
    async lockOwners(name) {
      const rows = (await mariaDbQuery(port(), `SELECT owner FROM ${DEFAULT_TABLE} WHERE lock_key = ?`, [
        name,
      ])) as { owner: string }[]
      return rows.map((row) => row.owner)
    },
    // An hour ago either way: past the retiring margin (over a minute, and twice innodb_lock_wait_timeout).
    expire: (name) => expireRow(port(), name, ELECTIONS),
    deleteRow: (name) => deleteState(port(), name, ELECTIONS),
    resignDeletes: false,
    valueColumn: /value VARBINARY/,
  }))

  it('the elections table is <table>_elections', () => {
    assert.equal(ELECTIONS, 'fencelock_locks_elections')
  })

  it('offers no watch: observers read once a second (the doorbell wakes only at releases)', async () => {
    const backend = await fromUrl(new URL(store().url()))
    try {
      assert.ok(backend.election, 'MySQL offers elections')
      assert.equal(backend.election.watch, undefined)
    } finally {
      await backend.close()
    }
  })
})
