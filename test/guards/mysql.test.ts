/**
 * The MySQL/MariaDB fence guard on a real MariaDB 10.11, locks from the MySQL backend: a paused holder's
 * late write is refused once the next holder has written; the first write after the fence column is
 * added goes through (a `fence < ?` check refuses it, and every later one); fences above 2^53 compare
 * exactly; rows are counted right without mysql2's FOUND_ROWS flag.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createConnection, createPool, type Pool, type ResultSetHeader } from 'mysql2/promise'
import { guardedUpdate } from '../../src/guards/mysql.js'
import { createLockClient, type LockClient } from '../../src/index.js'
import type { KitStore } from '../kits/kit.js'
import { mysqlKit } from '../kits/mysql.js'
import { MARIADB_DATABASE } from '../servers/mariadb.js'
import { pausedHolder } from './paused-holder.js'

describe('guards/mysql (MariaDB 10.11)', { timeout: 180_000 }, () => {
  let store: KitStore
  let locks: LockClient
  let pool: Pool
  let port: number
  before(async () => {
    store = await mysqlKit.start()
    port = store.ports[0]!
    locks = createLockClient(store.url(), { ttl: 1000 })
    pool = createPool({
      host: '127.0.0.1',
      port,
      user: 'root',
      database: MARIADB_DATABASE,
      connectionLimit: 2,
    })
  })
  after(async () => {
    await locks?.close().catch(() => {})
    await pool?.end().catch(() => {})
    await store?.close()
  })

  /** A table `name` with row 7, to which the fence column is then added, as to an existing table. */
  const table = async (name: string) => {
    await pool.query(`CREATE TABLE ${name} (id INT PRIMARY KEY, body TEXT)`)
    await pool.query(`INSERT INTO ${name} VALUES (7, 'empty')`)
    await pool.query(`ALTER TABLE ${name} ADD COLUMN fence BIGINT NULL`)
  }
  const row = async (name: string) => {
    const [rows] = await pool.query(`SELECT body, CAST(fence AS CHAR) AS fence FROM ${name} WHERE id = 7`)
    const [found] = rows as Array<{ body: string; fence: string | null }>
    return [found!.body, found!.fence]
  }

  it("refuses a paused holder's write once the next holder has written; the first write goes through", async () => {
    await table('report')
    const write = (body: string, fence: bigint) =>
      guardedUpdate(pool, { table: 'report', set: { body }, where: { id: 7 }, fence })
    const { stale, next } = await pausedHolder(locks, 'report:7', async (a) => {
      assert.equal(await write('first', a.fence), true, 'the first write after adding the column')
      assert.equal(await write('first, again', a.fence), true, 'a holder may write more than once')
    })
    assert.equal(await write('second', next.fence), true)
    assert.equal(await write('stale', stale.fence), false, 'the paused holder is refused')
    assert.deepEqual(await row('report'), ['second', String(next.fence)])
    await next.release()
  })

  it('(the check `fence < ?` refuses the first write after adding the column: why IS NULL is there)', async () => {
    await table('report_lt')
    const [result] = await pool.query('UPDATE report_lt SET body = ?, fence = ? WHERE id = ? AND fence < ?', [
      'first',
      '5',
      7,
      '5',
    ])
    assert.equal((result as ResultSetHeader).affectedRows, 0)
    assert.equal(
      await guardedUpdate(pool, { table: 'report_lt', set: { body: 'first' }, where: { id: 7 }, fence: 5n }),
      true,
    )
  })

  it('fences above 2^53 that differ by one: the older is refused (compared as integers, not doubles)', async () => {
    await table('report_big')
    const newer = 2n ** 53n + 1n
    const write = (body: string, fence: bigint) =>
      guardedUpdate(pool, { table: 'report_big', set: { body }, where: { id: 7 }, fence })
    assert.equal(await write('newer', newer), true)
    assert.equal(await write('older', newer - 1n), false)
    assert.deepEqual(await row('report_big'), ['newer', String(newer)])
    assert.equal(await write('largest', 2n ** 63n - 1n), true)
  })

  it('without the FOUND_ROWS flag, a write of the values already there still counts as written', async () => {
    await table('report_flags')
    const connection = await createConnection({
      host: '127.0.0.1',
      port,
      user: 'root',
      database: MARIADB_DATABASE,
      flags: ['-FOUND_ROWS'],
    })
    try {
      const write = () =>
        guardedUpdate(connection, {
          table: 'report_flags',
          set: { body: 'same' },
          where: { id: 7 },
          fence: 3n,
        })
      assert.equal(await write(), true)
      assert.equal(await write(), true, 'the same values, the same fence: matched, unchanged')
      assert.equal(
        await guardedUpdate(connection, {
          table: 'report_flags',
          set: { body: 'x' },
          where: { id: 7 },
          fence: 2n,
        }),
        false,
      )
      assert.equal(
        await guardedUpdate(connection, {
          table: 'report_flags',
          set: { body: 'x' },
          where: { id: 8 },
          fence: 9n,
        }),
        false,
        'no such row',
      )
    } finally {
      connection.destroy()
    }
  })

  it('names quoted with backticks (under ANSI_QUOTES too), a custom fence column, and bad arguments', async () => {
    await pool.query('CREATE TABLE `odd name` (`key` INT PRIMARY KEY, `the body` TEXT, `epoch` BIGINT NULL)')
    await pool.query('INSERT INTO `odd name` VALUES (1, NULL, NULL)')
    const connection = await pool.getConnection()
    try {
      await connection.query("SET SESSION sql_mode = 'ANSI_QUOTES,ANSI'")
      const update = { table: 'odd name', set: { 'the body': 'x' }, where: { key: 1 }, fenceColumn: 'epoch' }
      assert.equal(await guardedUpdate(connection, { ...update, fence: 4n }), true)
      assert.equal(await guardedUpdate(connection, { ...update, fence: 3n }), false)
      await connection.query('SET SESSION sql_mode = DEFAULT')
    } finally {
      connection.release()
    }
    const base = { table: 'report', set: { body: 'x' }, where: { id: 7 } }
    await assert.rejects(
      guardedUpdate(pool, { ...base, fence: 5 as never }),
      /Expected `fence` to be a lock's fence/,
    )
    await assert.rejects(guardedUpdate(pool, { ...base, fence: -1n }), /got -1n/)
    await assert.rejects(guardedUpdate(pool, { ...base, where: {}, fence: 1n }), /`where` to name the row/)
  })
})
