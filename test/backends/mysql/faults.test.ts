/**
 * MySQL/MariaDB under faults, on a real MariaDB 10.11: a server restart under a holder and a waiter, every
 * connection killed (`KILL`), a paused holder process that keeps its doorbell connection open, and a
 * partition through the test proxy. The lease row alone grants; the doorbell only wakes.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { mariaDbQuery } from '../../kits/mysql.js'
import { MARIADB_DATABASE, type MariaDbServer, startMariaDb } from '../../servers/mariadb.js'
import { awaitLater } from '../../support/later.js'
import { startHold } from '../../support/processes.js'
import { startProxy } from '../../support/proxy.js'
import { abortedWithin, waitUntil } from '../../support/wait.js'

describe('mysql (MariaDB 10.11): faults', { timeout: 180_000 }, () => {
  let server: MariaDbServer
  const open: LockClient[] = []
  const client = (url = server.url, options: Parameters<typeof createLockClient>[1] = {}) => {
    const c = createLockClient(url, options)
    open.push(c)
    return c
  }
  before(async () => {
    server = await startMariaDb()
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})))
    await server.destroy()
  })

  it('keeps a holder through a server restart; its waiter gets the lock after it, with a larger fence', async () => {
    const a = client(server.url, { ttl: '20s' })
    const b = client(server.url, { ttl: '20s' })
    const lock = await a.acquire('restart')
    const waiting = awaitLater(b.acquire('restart', { timeout: '60s' }))
    await server.restart()
    // The row was committed before the restart: the holder's renewal finds it still ours.
    await waitUntil(
      async () => (await lock.extend().then(() => true)) && !lock.signal.aborted,
      'the holder to renew after the restart',
      { withinMs: 20_000, everyMs: 200 },
    )
    assert.equal(await b.tryAcquire('restart'), null, 'granted while the holder still holds')
    await lock.release()
    const next = await waiting
    assert.ok(next.fence > lock.fence, `fence ${next.fence} not above ${lock.fence}`)
    await next.release()
  })

  it('survives KILL of every connection: the holder renews, its waiter still wakes on release', async () => {
    const a = client(server.url, { ttl: '3s' })
    const b = client(server.url, { ttl: '3s' })
    const lock = await a.acquire('killed')
    const waiting = awaitLater(b.acquire('killed', { timeout: '60s' }))
    // B is blocked in its doorbell wait by now, or soon: kill everything but our own connection.
    await waitUntil(
      async () => {
        const rows = (await mariaDbQuery(
          server.port,
          "SELECT COUNT(*) AS n FROM information_schema.processlist WHERE info LIKE '%GET_LOCK%' AND id <> CONNECTION_ID()",
        )) as { n: number }[]
        return Number(rows[0]?.n) > 0
      },
      'the waiter to block on the doorbell',
      { withinMs: 10_000 },
    )
    const killed = (await mariaDbQuery(
      server.port,
      "SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND command <> 'Daemon' AND user = 'root'",
    )) as { id: number }[]
    assert.ok(killed.length >= 2, `expected the clients' connections, got ${killed.length}`)
    for (const { id } of killed) await mariaDbQuery(server.port, 'KILL ?', [id]).catch(() => {})
    // Renewals (every second) reconnect; the lease was never in danger.
    await waitUntil(
      async () => (await lock.extend().then(() => true)) && !lock.signal.aborted,
      'the holder to renew after KILL',
      { withinMs: 10_000, everyMs: 100 },
    )
    assert.equal(await b.tryAcquire('killed'), null)
    await lock.release()
    const next = await waiting
    assert.ok(next.fence > lock.fence)
    await next.release()
  })

  it("wakes a waiter at a paused holder's lease end although its doorbell connection stays open", async () => {
    const holder = startHold(server.url, 'paused', ['--ttl', '2s'])
    const held = await holder.next('acquired')
    const b = client(server.url, { ttl: '5s' })
    const waiting = b.acquire('paused', { timeout: '60s' })
    holder.child.kill('SIGSTOP')
    try {
      // The holder's process is frozen with its connections open (its doorbell still held): the waiter's
      // GET_LOCK times out at the lease's end on the server, and the row grants.
      const next = await waiting
      assert.ok(next.fence > BigInt(held.fence as string))
      holder.child.kill('SIGCONT')
      // Resumed, the holder finds its lease taken: lost (exit 76), and it never released B's lock.
      await holder.next('lost', 30_000)
      assert.equal(await holder.exited, 76)
      const info = await b.inspect('paused')
      assert.equal(info?.held, true)
      assert.equal(info?.fence, next.fence)
      await next.release()
    } finally {
      holder.child.kill('SIGCONT')
      holder.child.kill('SIGKILL')
    }
  })

  it('a holder cut off by a partition loses its lock by validity; another client takes it after the lease', async () => {
    const proxy = await startProxy(server.port)
    try {
      const cut = client(`mysql://root@127.0.0.1:${proxy.port}/${MARIADB_DATABASE}`, { ttl: '2s' })
      const other = client(server.url, { ttl: '5s' })
      const lock = await cut.acquire('partition')
      proxy.mode = 'blackhole'
      assert.ok((await abortedWithin(lock.signal, 15_000)) instanceof LockLostError)
      const next = await other.acquire('partition', { timeout: '30s' })
      assert.ok(next.fence > lock.fence)
      // Healed (the stuck connections reset): the old holder's release touches nothing of the new one's.
      proxy.mode = 'pass'
      proxy.cut()
      await lock.release().catch(() => {})
      const info = await other.inspect('partition')
      assert.equal(info?.held, true)
      assert.equal(info?.fence, next.fence)
      await next.release()
    } finally {
      await proxy.close()
    }
  })

  it('a statement stuck on a connection that a partition left dead does not hold up the client after it heals', async () => {
    const proxy = await startProxy(server.port)
    try {
      const locks = client(`mysql://root@127.0.0.1:${proxy.port}/${MARIADB_DATABASE}`, { ttl: '2s' })
      const lock = await locks.acquire('stuck-a')
      // Bytes vanish both ways and no reset ever comes: the renewal in flight never gets an answer.
      proxy.mode = 'blackhole'
      assert.ok((await abortedWithin(lock.signal, 15_000)) instanceof LockLostError)
      // Healed, but the old connections stay dead (their bytes were dropped): later statements of this
      // client must go to a fresh connection instead of queueing behind the stuck one.
      proxy.mode = 'pass'
      const next = await locks.acquire('stuck-b', { timeout: '20s' })
      await next.release()
    } finally {
      await proxy.close()
    }
  })
})
