/**
 * The MySQL/MariaDB doorbell and the connections a client uses, on a real MariaDB 10.11: a release whose
 * reply was lost leaves the key's bell to the client's next grant; a waiter that gave up holds no pool
 * connection for long, and waits on many keys never take the connection a renewal needs; a row lock on one
 * key's row holds up neither the client's other lease nor its grant of a free key; a TRUNCATE of the table
 * does not wait for blocked waiters; two databases on one server have bells of their own.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { doorbellName } from '../../../src/backends/mysql/index.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { mariaDbQuery } from '../../kits/mysql.js'
import { MARIADB_DATABASE, type MariaDbServer, startMariaDb } from '../../servers/mariadb.js'
import { startProxy } from '../../support/proxy.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'

const TABLE = '`fencelock_locks`'

describe('mysql (MariaDB 10.11): doorbell and connections', { timeout: 180_000 }, () => {
  let server: MariaDbServer
  const open: LockClient[] = []
  const client = (url: string, ttl: string) => {
    const c = createLockClient(url, { ttl })
    open.push(c)
    return c
  }
  /** The connection holding `key`'s bell in `database`, or null. */
  const bellHolder = async (key: string, database = MARIADB_DATABASE) => {
    const rows = (await mariaDbQuery(server.port, 'SELECT IS_USED_LOCK(?) AS id', [
      doorbellName(database, TABLE, key),
    ])) as { id: number | null }[]
    return rows[0]?.id ?? null
  }
  /** How many doorbell waits are blocked on the server now. */
  const doorbellWaits = async () => {
    const rows = (await mariaDbQuery(
      server.port,
      "SELECT COUNT(*) AS n FROM information_schema.processlist WHERE info LIKE 'SELECT IF(IS_FREE_LOCK%' AND id <> CONNECTION_ID()",
    )) as { n: number }[]
    return Number(rows[0]?.n)
  }
  before(async () => {
    server = await startMariaDb()
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})))
    await server.destroy()
  })

  it('a release whose reply was lost leaves the bell to the next grant of the same client', async () => {
    const proxy = await startProxy(server.port)
    try {
      const locks = client(`mysql://root@127.0.0.1:${proxy.port}/${MARIADB_DATABASE}`, '5s')
      // One cycle first: the release statement is then prepared on the connection (a prepare whose reply
      // is lost would keep it from running at all).
      await (await locks.acquire('lost-release')).release()
      const lock = await locks.acquire('lost-release')
      assert.notEqual(await bellHolder('lost-release'), null, 'the grant took no bell')
      // The release is applied, its reply never arrives; then the connection resets.
      proxy.mode = 'drop-replies'
      const releasing = lock.release().then(
        () => undefined,
        (error: unknown) => error,
      )
      await waitUntil(
        async () => {
          const rows = (await mariaDbQuery(
            server.port,
            'SELECT released FROM fencelock_locks WHERE lock_key = ?',
            ['lost-release'],
          )) as { released: number }[]
          return rows[0]?.released === 1
        },
        'the release to be applied',
        { withinMs: 10_000 },
      )
      proxy.mode = 'pass'
      proxy.cut()
      await releasing
      const again = await locks.acquire('lost-release', { timeout: '10s' })
      assert.ok(again.fence > lock.fence)
      // Its waiters are rung again: the new grant holds the bell.
      assert.notEqual(await bellHolder('lost-release'), null, 'the next grant took no bell')
      await again.release()
    } finally {
      await proxy.close()
    }
  })

  it('a waiter that gave up holds no pool connection for long', async () => {
    const holder = client(server.url, '60s')
    const lock = await holder.acquire('given-up')
    const waiter = client(server.url, '5s')
    await assert.rejects(waiter.acquire('given-up', { timeout: '1s' }))
    // Its doorbell wait ends by its own bound, long before the holder's 60 s lease.
    await waitUntil(async () => (await doorbellWaits()) === 0, 'the doorbell wait to end', {
      withinMs: 20_000,
    })
    await lock.release()
  })

  it('waits on many keys never take the connection a renewal needs', async () => {
    const locks = client(server.url, '3s')
    const mine = await locks.acquire('renewed')
    // Every connection this client has now (its lease connection, its pool's idle ones): killed below.
    const ours = (await mariaDbQuery(
      server.port,
      "SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND command <> 'Daemon'",
    )) as { id: number }[]
    const other = client(server.url, '60s')
    const keys = Array.from({ length: 12 }, (_, i) => `busy-${i}`)
    const held = await Promise.all(keys.map((key) => other.acquire(key)))
    // Twelve waiters on twelve held keys, more than the pool's 10 connections.
    const waiting = keys.map((key) =>
      locks.acquire(key, { timeout: '60s' }).then(
        (lock) => lock,
        () => undefined,
      ),
    )
    await waitUntil(async () => (await doorbellWaits()) >= 2, 'the waiters to block on doorbells', {
      withinMs: 15_000,
    })
    for (const { id } of ours) await mariaDbQuery(server.port, 'KILL ?', [id]).catch(() => {})
    // The lease connection is replaced at once: the lock renews and inspect answers.
    await waitUntil(async () => (await mine.extend().then(() => true)) && !mine.signal.aborted, 'a renewal', {
      withinMs: 10_000,
      everyMs: 200,
    })
    const info = await Promise.race([locks.inspect('renewed'), sleep(10_000).then(() => 'hung')])
    assert.notEqual(info, 'hung', 'inspect hung')
    assert.equal((info as { held: boolean } | null)?.held, true)
    assert.ok(!mine.signal.aborted)
    await mine.release()
    await Promise.all(held.map((lock) => lock.release()))
    for (const lock of await Promise.all(waiting)) await lock?.release()
  })

  it("a row lock on one key's row holds up neither the client's other lease nor its grant of a free key", async () => {
    const locks = client(server.url, '3s')
    const a = await locks.acquire('row-a')
    const b = await locks.acquire('row-b')
    // An operator locks A's row in an open transaction: A's renewal blocks on it.
    const { createConnection } = await import('mysql2/promise')
    const operator = await createConnection({
      host: '127.0.0.1',
      port: server.port,
      user: 'root',
      database: MARIADB_DATABASE,
    })
    try {
      await operator.query('BEGIN')
      await operator.query('SELECT * FROM fencelock_locks WHERE lock_key = ? FOR UPDATE', ['row-a'])
      const c = await locks.acquire('row-c', { timeout: '5s' })
      // B keeps renewing (three times its ttl) while A's row stays locked.
      await sleep(9000)
      assert.equal(b.signal.aborted, false, 'B was lost to the row lock on A')
      await c.release()
    } finally {
      await operator.query('COMMIT').catch(() => {})
      operator.destroy()
    }
    await b.release()
    await a.release().catch(() => {})
  })

  it('a TRUNCATE of the table does not wait for blocked doorbell waits', async () => {
    const holder = client(server.url, '60s')
    const lock = await holder.acquire('truncated')
    const waiter = client(server.url, '5s')
    const waiting = waiter.acquire('truncated', { timeout: '60s' }).then(
      (next) => next,
      (error: unknown) => error,
    )
    await waitUntil(async () => (await doorbellWaits()) > 0, 'the waiter to block on the doorbell', {
      withinMs: 15_000,
    })
    // A blocked wait holding the table's metadata lock would keep TRUNCATE (and every lock statement
    // queued behind it) waiting: 2 s is far less than the wait's own bound.
    await mariaDbQuery(server.port, 'SET STATEMENT lock_wait_timeout = 2 FOR TRUNCATE TABLE fencelock_locks')
    // The row is gone: the waiter takes the lock (its next attempt, at the latest), with a larger fence.
    const next = await waiting
    assert.ok(!(next instanceof Error), String(next))
    assert.ok((next as typeof lock).fence > lock.fence)
    await (next as typeof lock).release()
  })

  it('two databases on one server have bells of their own', async () => {
    await mariaDbQuery(server.port, 'CREATE DATABASE IF NOT EXISTS fencelock_other')
    const here = client(server.url, '10s')
    const there = client(`mysql://root@127.0.0.1:${server.port}/fencelock_other`, '10s')
    const one = await here.acquire('same-name')
    const two = await there.acquire('same-name')
    const first = await bellHolder('same-name')
    const second = await bellHolder('same-name', 'fencelock_other')
    assert.notEqual(first, null)
    assert.notEqual(second, null)
    assert.notEqual(first, second, "one connection holds both databases' bells")
    await one.release()
    await two.release()
  })
})
