/**
 * MySQL/MariaDB under `sql_mode`s other than the default, on a real MariaDB 10.11. Under
 * SIMULTANEOUS_ASSIGNMENT (also part of MariaDB's ORACLE mode) every assignment of an UPDATE sees the row as
 * it was, so an acquire whose later assignments read what an earlier one decided granted a released lock
 * with fence 0, and a third client while the second held it. The acquire statement must not depend on the
 * mode, and fencelock pins its own sessions' settings (autocommit too); doctor reports the server's, and
 * a pool of yours with autocommit off.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { type Connection, createConnection, createPool, type ResultSetHeader } from 'mysql2/promise'
import { fromUrl, mysqlBackend, tableDdl } from '../../../src/backends/mysql/index.js'
import { acquireSql, releaseSql } from '../../../src/backends/mysql/statements.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { MARIADB_DATABASE, type MariaDbServer, startMariaDb } from '../../servers/mariadb.js'

/** Every mode the statements must hold under (each alone; the kits run combinations server-wide). */
const MODES = [
  '',
  'SIMULTANEOUS_ASSIGNMENT',
  'ORACLE',
  'ANSI',
  'TRADITIONAL',
  'STRICT_ALL_TABLES',
  'NO_BACKSLASH_ESCAPES',
  'PAD_CHAR_TO_FULL_LENGTH,NO_UNSIGNED_SUBTRACTION,HIGH_NOT_PRECEDENCE',
]

describe('mysql (MariaDB 10.11): sql_mode', { timeout: 180_000 }, () => {
  let server: MariaDbServer
  const open: LockClient[] = []
  before(async () => {
    server = await startMariaDb({ args: ['--sql-mode=SIMULTANEOUS_ASSIGNMENT'] })
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})))
    await server.destroy()
  })

  for (const bell of [false, true]) {
    it(`the acquire statement${bell ? ' (with the doorbell)' : ''} decides alike under every sql_mode`, async () => {
      const table = `modes_${bell ? 'bell' : 'plain'}`
      const connection: Connection = await createConnection({
        host: '127.0.0.1',
        port: server.port,
        user: 'root',
        database: MARIADB_DATABASE,
        flags: ['-FOUND_ROWS'],
        supportBigNumbers: true,
        bigNumberStrings: true,
      })
      try {
        await connection.query(tableDdl(`\`${table}\``))
        const acquire = acquireSql(`\`${table}\``, bell)
        const release = releaseSql(`\`${table}\``, false, bell)
        for (const mode of MODES) {
          await connection.query('SET SESSION sql_mode = ?', [mode])
          const key = `k-${mode}`
          const b = bell ? [`bell-${mode}`] : []
          const run = async (owner: string) => {
            const [r] = await connection.execute<ResultSetHeader>(acquire, [
              key,
              owner,
              60_000,
              ...b,
              ...b,
              'h',
              owner,
              ...b,
              'h',
              owner,
              owner,
              60_000,
            ])
            return { granted: r.affectedRows > 0, value: BigInt(r.insertId) }
          }
          const row = async () => {
            const [rows] = await connection.query(
              'SELECT owner, CAST(fence AS CHAR) AS fence FROM ?? WHERE lock_key = ?',
              [table, key],
            )
            const [first] = rows as { owner: string; fence: string }[]
            return { owner: first?.owner, fence: BigInt(first?.fence ?? -1) }
          }
          const a = await run('a')
          assert.ok(a.granted, `${mode}: a not granted`)
          assert.deepEqual(await row(), { owner: 'a', fence: a.value }, mode)
          // Renewed: the same fence.
          assert.deepEqual(await run('a'), a, `${mode}: a's renewal`)
          // Held: refused, told the lease left (at most 60 s).
          const refused = await run('b')
          assert.ok(!refused.granted && refused.value <= 60_000n, `${mode}: b granted while a holds`)
          // Released: b takes it, with a larger fence; c is refused while b holds.
          await connection.execute(release, [...(bell ? [`bell-${mode}`] : []), key, 'a'])
          const b1 = await run('b')
          assert.ok(
            b1.granted && b1.value > a.value,
            `${mode}: b after the release: ${JSON.stringify(b1, (_, v) => String(v))}`,
          )
          assert.deepEqual(await row(), { owner: 'b', fence: b1.value }, mode)
          assert.ok(!(await run('c')).granted, `${mode}: c granted while b holds`)
          // Expired: c takes it over, with a larger fence.
          await connection.query('UPDATE ?? SET expires_at = 0 WHERE lock_key = ?', [table, key])
          const c1 = await run('c')
          assert.ok(c1.granted && c1.value > b1.value, `${mode}: c after the expiry`)
          assert.deepEqual(await row(), { owner: 'c', fence: c1.value }, mode)
          assert.ok(!(await run('d')).granted, `${mode}: d granted while c holds`)
        }
      } finally {
        await connection.end()
      }
    })
  }

  it('under a server-wide SIMULTANEOUS_ASSIGNMENT, a released lock goes to one client, with a larger fence', async () => {
    const pool = createPool({
      host: '127.0.0.1',
      port: server.port,
      user: 'root',
      database: MARIADB_DATABASE,
      flags: ['-FOUND_ROWS'],
    })
    try {
      for (const locks of [
        createLockClient(server.url, { ttl: '10s' }),
        createLockClient(mysqlBackend({ pool }), { ttl: '10s' }),
      ]) {
        open.push(locks)
        const other = createLockClient(server.url, { ttl: '10s' })
        open.push(other)
        const first = await locks.acquire('simultaneous')
        await first.release()
        const second = await other.acquire('simultaneous', { timeout: '5s' })
        assert.ok(second.fence > first.fence, `fence ${second.fence} after ${first.fence}`)
        assert.equal(await locks.tryAcquire('simultaneous'), null, 'granted while another holds')
        await second.release()
        const third = await locks.acquire('simultaneous', { timeout: '5s' })
        assert.ok(third.fence > second.fence)
        await third.release()
        await locks.close()
      }
    } finally {
      await pool.end()
    }
  })

  it('doctor: a pool of yours whose sessions have autocommit off is an error', async () => {
    const pool = createPool({
      host: '127.0.0.1',
      port: server.port,
      user: 'root',
      database: MARIADB_DATABASE,
      flags: ['-FOUND_ROWS'],
    })
    pool.pool.on('connection', (connection) => {
      connection.query('SET SESSION autocommit = 0', () => {})
    })
    try {
      const backend = mysqlBackend({ pool })
      const findings = await backend.doctor!(AbortSignal.timeout(10_000)).finally(() => backend.close())
      assert.ok(
        findings.some((f) => f.level === 'error' && /autocommit off/.test(f.message)),
        JSON.stringify(findings),
      )
    } finally {
      await pool.end()
    }
  })

  it("doctor reports the server's sql_mode and the session's", async () => {
    const backend = await fromUrl(new URL(server.url))
    const findings = await backend.doctor!(AbortSignal.timeout(10_000)).finally(() => backend.close())
    const mode = findings.find((f) => /sql_mode/.test(f.message))
    assert.ok(mode, JSON.stringify(findings))
    assert.match(mode.message, /server's default is "SIMULTANEOUS_ASSIGNMENT"/)
    // A connection of the pool fencelock made runs in its own settings.
    assert.match(mode.message, /session has "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION"/)
  })
})
