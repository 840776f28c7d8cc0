/**
 * `fencelock doctor` on the SQL backends changes nothing: with createTable on (the default), a missing lock
 * table is reported with its DDL, and neither the table nor its fence sequence is made; a table's lock
 * names are counted.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import postgres from 'postgres'
import { type MariaDbServer, startMariaDb } from '../servers/mariadb.js'
import { type PostgresServer, startPostgres } from '../servers/postgres.js'
import { runCli } from '../support/processes.js'

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
})
