/**
 * A Redis break whose reply a dropped connection lost. ioredis resends a command it sent but heard no
 * reply to once it has reconnected (its default, and what a client the application passes in does): the
 * first run already ended the stuck grant and woke a waiter, so the resent run finds the waiter's fresh
 * grant. A break names the grant it read, and the resent run must leave any other alone.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisBackend } from '../../../src/backends/redis/index.js'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import { BREAK } from '../../../src/backends/redis/mutex/scripts.js'
import { type RedisServer, startRedis } from '../../servers/redis.js'
import { startProxy } from '../../support/proxy.js'

let server: RedisServer
let admin: Redis
const live = new AbortController().signal
const owner = () => randomBytes(16).toString('hex')

before(async () => {
  server = await startRedis()
  admin = new Redis(server.port, '127.0.0.1')
})
after(async () => {
  admin.disconnect()
  await server.destroy()
})

it('a break resent after a lost reply leaves the waiter that took the lock meanwhile alone', async () => {
  const k = `redis-break-resend-${randomBytes(3).toString('hex')}`
  const direct = redisBackend({ client: admin })
  // The scripts are in the server's cache: the break's first run needs no NOSCRIPT round.
  await admin.script('LOAD', BREAK.source)
  const stuck = owner()
  assert.ok((await direct.tryAcquire({ key: k, owner: stuck, ttlMs: 60_000 }, live)).granted)

  const proxy = await startProxy(server.port)
  // fencelock's own failure policy (connect.ts): one reconnect before a command fails.
  const lossy = new Redis({ port: proxy.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  lossy.on('error', () => {})
  try {
    await lossy.ping()
    const operator = redisBackend({ client: lossy })
    const waiter = owner()
    let sent = false
    let taken: Promise<void> | undefined
    // The break's reply is lost; before the connection drops, the waiter takes the lock the break freed.
    proxy.filter = (chunk, direction) => {
      if (direction === 'request') sent ||= chunk.includes(BREAK.sha)
      if (direction !== 'reply' || !sent || taken) return true
      taken = (async () => {
        assert.equal(await admin.exists(redisLockKeys(k).lock), 0, 'the first run ended the stuck grant')
        assert.ok((await direct.tryAcquire({ key: k, owner: waiter, ttlMs: 60_000 }, live)).granted)
        proxy.cut()
      })()
      return false
    }
    const result = await operator.breakLock!(k, {})
    await taken
    const value = await admin.get(redisLockKeys(k).lock)
    assert.ok(value?.startsWith(waiter), `the waiter's grant must stand, found ${value}`)
    // The resent run's answer is all the caller hears: the waiter holds, unbroken (the lost reply said broken).
    assert.deepEqual([result.broken, result.lease?.owner], [false, waiter])
  } finally {
    lossy.disconnect()
    await proxy.close()
  }
})
