/**
 * `fencelock doctor` on the SQL backends changes nothing: with createTable on (the default), a missing lock
 * table is reported with its DDL, and neither the table nor its fence sequence is made; a table's lock
 * names are counted. The elections table beside it likewise: missing until the first campaign, then
 * present with its elections counted, and an error when it lacks the leader's value column.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import postgres from 'postgres'
import { tableDdl as mysqlTableDdl, quoteTable } from '../../src/backends/mysql/layout.js'
import { ddl as pgDdl } from '../../src/backends/postgres/layout.js'
import { mariaDbQuery } from '../kits/mysql.js'
import { type MariaDbServer, startMariaDb } from '../servers/mariadb.js'
import { type PostgresServer, startPostgres } from '../servers/postgres.js'
import { runCli } from '../support/processes.js'

/**
 * Doctor on `url(table)`'s elections table: missing (not made by doctor), then made by a campaign and
 * counted (a resign deletes the row on PostgreSQL, marks it released on MariaDB); `makeLockShaped(name)` makes a table of the lock table's shape, which doctor must refuse as an
 * elections table.
 */
async function electionsTableChecks(
  url: (table: string) => string,
  makeLockShaped: (table: string) => Promise<void>,
): Promise<void> {
  const fresh = url('doctor_elect')
  const missing = await runCli(['doctor', fresh])
  assert.equal(missing.code, 0, missing.stdout + missing.stderr)
  assert.match(
    missing.stdout,
    /the elections table \S*doctor_elect_elections\S* does not exist yet; the first campaign creates it/,
  )
  const again = await runCli(['doctor', fresh])
  assert.match(
    again.stdout,
    /doctor_elect_elections\S* does not exist yet/,
    'still missing after a doctor run',
  )
  const elected = await runCli(['elect', 'doctor-counted', '--url', fresh, '--', 'true'])
  assert.equal(elected.code, 0, elected.stderr)
  const present = await runCli(['doctor', fresh])
  assert.equal(present.code, 0, present.stdout + present.stderr)
  assert.match(present.stdout, /the elections table \S*doctor_elect_elections\S* exists/)
  assert.match(
    present.stdout,
    /the elections table \S*doctor_elect_elections\S* keeps [01] election name\(s\), 0 with a leader now/,
  )
  assert.match(present.stdout, /doctor_elect_elections\S* has its value column/)
  await makeLockShaped('doctor_shape_elections')
  const shaped = await runCli(['doctor', url('doctor_shape')])
  assert.notEqual(shaped.code, 0, shaped.stdout)
  assert.match(shaped.stdout, /doctor_shape_elections\S* has no value column .*: every campaign fails/)
}

describe('fencelock doctor on SQL: no side effects', { timeout: 180_000 }, () => {
  let pg: PostgresServer
  let maria: MariaDbServer
  before(async () => {
    ;[pg, maria] = await Promise.all([startPostgres(), startMariaDb()])
  })
  after(async () => {
    await Promise.all([pg?.destroy(), maria?.destroy()])
  })

  it('PostgreSQL: a missing table is reported, not created, nor its sequence', async () => {
    const r = await runCli(['doctor', pg.url('?table=doctor_untouched')])
    assert.equal(r.code, 0, r.stdout + r.stderr)
    assert.match(r.stdout, /doctor_untouched.* does not exist yet/)
    const sql = postgres(pg.url(), { max: 1, onnotice: () => {} })
    try {
      const found = await sql.unsafe(
        "SELECT relname FROM pg_catalog.pg_class WHERE relname LIKE 'doctor_untouched%'",
      )
      assert.equal(found.length, 0, JSON.stringify(found))
    } finally {
      await sql.end()
    }
  })

  it('MariaDB: a missing table is reported, not created; a table is counted', async () => {
    const url = `${maria.url}?table=doctor_untouched`
    const r = await runCli(['doctor', url])
    assert.equal(r.code, 0, r.stdout + r.stderr)
    assert.match(r.stdout, /doctor_untouched.* does not exist yet/)
    const again = await runCli(['doctor', url])
    assert.match(again.stdout, /does not exist yet/, 'still missing after a doctor run')
    const ran = await runCli(['run', 'counted', '--url', url, '--', 'true'])
    assert.equal(ran.code, 0, ran.stderr)
    const counted = await runCli(['doctor', url])
    assert.match(counted.stdout, /the table keeps 1 lock name\(s\), 0 held now/)
  })

  it('PostgreSQL: the elections table, missing until the first campaign, then counted and checked', async () => {
    const sql = postgres(pg.url(), { max: 1, onnotice: () => {} })
    try {
      await electionsTableChecks(
        (table) => pg.url(`?table=${table}`),
        async (table) => {
          await sql.unsafe(pgDdl({ schema: 'public', table })).simple()
        },
      )
    } finally {
      await sql.end()
    }
  })

  it('MariaDB: the elections table, missing until the first campaign, then counted and checked', async () => {
    await electionsTableChecks(
      (table) => `${maria.url}?table=${table}`,
      async (table) => {
        await mariaDbQuery(maria.port, mysqlTableDdl(quoteTable(table, 'in a test')))
      },
    )
  })
})
