/**
 * The MySQL/MariaDB backend's own surface, on a real MariaDB 10.11: the user's pool (refused with
 * FOUND_ROWS on, never ended), the table on first use or refused with its DDL, the URL forms, and doctor's
 * findings (binlog format, time zone, the failover caveat).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createPool } from 'mysql2/promise'
import { mysqlBackend, tableDdl } from '../../../src/backends/mysql/index.js'
import { createLockClient } from '../../../src/index.js'
import { mariaDbQuery } from '../../kits/mysql.js'
import { MARIADB_DATABASE, type MariaDbServer, startMariaDb } from '../../servers/mariadb.js'

const poolOn = (port: number, flags: string[] = ['-FOUND_ROWS']) =>
  createPool({ host: '127.0.0.1', port, user: 'root', database: MARIADB_DATABASE, flags })

describe('mysql backend (MariaDB 10.11)', { timeout: 120_000 }, () => {
  let server: MariaDbServer
  before(async () => {
    server = await startMariaDb()
  })
  after(() => server.destroy())

  it("refuses a pool with FOUND_ROWS on (mysql2's default), saying why", async () => {
    const pool = poolOn(server.port, [])
    try {
      assert.throws(() => mysqlBackend({ pool }), /FOUND_ROWS[\s\S]*could not tell them apart/)
    } finally {
      await pool.end()
    }
  })

  it("runs on the user's pool and leaves it open on close", async () => {
    const pool = poolOn(server.port)
    try {
      const locks = createLockClient(mysqlBackend({ pool, table: 'user_pool_locks' }), { ttl: '5s' })
      const lock = await locks.acquire('own-pool')
      assert.equal(await locks.tryAcquire('own-pool'), null)
      await lock.release()
      await locks.close()
      const [rows] = await pool.query('SELECT CAST(fence AS CHAR) AS fence FROM user_pool_locks')
      assert.deepEqual(rows, [{ fence: String(lock.fence) }])
    } finally {
      await pool.end()
    }
  })

  it('with createTable=false, a missing table fails the acquire with its DDL; created, it works', async () => {
    const locks = createLockClient(`${server.url}?table=migrated_locks&createTable=false`, { ttl: '5s' })
    try {
      await assert.rejects(locks.acquire('migrated', { timeout: '2s' }), (error: Error) => {
        assert.match(error.message, /CREATE TABLE IF NOT EXISTS `migrated_locks`/)
        return true
      })
      await mariaDbQuery(server.port, tableDdl('`migrated_locks`'))
      const lock = await locks.acquire('migrated', { timeout: '5s' })
      assert.ok(lock.fence > 0n)
      await lock.release()
    } finally {
      await locks.close()
    }
  })

  it('takes mariadb:// as mysql:// and a database.table; refuses a URL without a database', async () => {
    const url = `mariadb://root@127.0.0.1:${server.port}/${MARIADB_DATABASE}?table=${MARIADB_DATABASE}.qualified_locks`
    const locks = createLockClient(url, { ttl: '5s' })
    try {
      await (await locks.acquire('scheme')).release()
    } finally {
      await locks.close()
    }
    const noDatabase = createLockClient(`mysql://root@127.0.0.1:${server.port}/`)
    await assert.rejects(noDatabase.acquire('x', { timeout: '1s' }), /DATABASE/)
    await noDatabase.close().catch(() => {})
  })

  it('doctor: a statement-based binlog is a warning, with the failover caveat', async () => {
    const binlogged = await startMariaDb({
      args: ['--log-bin=mysql-bin', '--binlog-format=STATEMENT', '--server-id=1'],
    })
    try {
      const pool = poolOn(binlogged.port)
      const backend = mysqlBackend({ pool })
      const findings = await backend.doctor!(AbortSignal.timeout(10_000))
      assert.ok(findings.some((f) => f.level === 'warn' && /binlog_format STATEMENT/.test(f.message)))
      assert.ok(findings.some((f) => /asynchronous replica/.test(f.message)))
      assert.ok(findings.some((f) => f.level === 'ok' && /time zone/.test(f.message)))
      await backend.close()
      await pool.end()
    } finally {
      await binlogged.destroy()
    }
  })
})
