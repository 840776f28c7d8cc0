/**
 * The Redis backend's socket writes: the scripts that one turn of the event loop sends (many acquires
 * under way on one client, the groups of a renewal batch) leave in one write, in order, each with its own
 * reply; a lone script is written at once.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import type { Socket } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisBackend } from '../../src/backends/redis/index.js'
import { createLockClient } from '../../src/index.js'
import { type RedisServer, startRedis } from '../servers/redis.js'

let server: RedisServer
const run = randomBytes(3).toString('hex')

before(async () => {
  server = await startRedis()
})
after(async () => {
  await server.destroy()
})

/** Counts the writes on `connection`'s socket (one system call each, however many commands it carries). */
function countWrites(connection: Redis): { readonly count: number } {
  const socket = connection.stream as Socket & {
    _write: (...args: unknown[]) => void
    _writev: (...args: unknown[]) => void
  }
  const counter = { count: 0 }
  for (const method of ['_write', '_writev'] as const) {
    const original = socket[method].bind(socket)
    socket[method] = (...args: unknown[]) => {
      counter.count++
      original(...args)
    }
  }
  return counter
}

describe('redis socket writes', { timeout: 60_000 }, () => {
  it('sends the scripts of one turn in one write, each answered in order', async () => {
    const connection = new Redis(server.port, '127.0.0.1')
    await connection.ping()
    const client = createLockClient(redisBackend({ client: connection }), { ttl: 30_000, renew: false })
    try {
      // The first use loads the script (NOSCRIPT, then its source): counted from the second on.
      await (await client.acquire(`writes-${run}-first`)).release()
      const writes = countWrites(connection)
      const keys = Array.from({ length: 100 }, (_, i) => `writes-${run}-${i}`)
      const locks = await Promise.all(keys.map((k) => client.acquire(k)))
      assert.deepEqual(
        locks.map((l) => l.key),
        keys,
      )
      // One write for the first script, one for the 99 corked behind it.
      assert.ok(writes.count <= 4, `100 acquires took ${writes.count} writes`)
      const before = writes.count
      await Promise.all(locks.map((l) => l.release()))
      assert.ok(writes.count - before <= 4, `100 releases took ${writes.count - before} writes`)
      for (const key of keys) assert.equal((await client.inspect(key)).held, false, key)
      // A lone script still goes out (and is answered) on its own.
      const lone = await client.acquire(`writes-${run}-lone`)
      assert.equal((await client.inspect(lone.key)).owner, lone.owner)
      await lone.release()
    } finally {
      await client.close()
      connection.disconnect()
    }
  })
})
