/**
 * The Redis backend's batched renewals (`extendMany`, one EXTEND_MANY script per batch): each lock of a
 * batch gets its own outcome, so a lock taken over is reported lost while the others stay renewed; and
 * the Cluster slot its batches are grouped by is the server's.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisBackend } from '../../../src/backends/redis/index.js'
import { slotOf } from '../../../src/backends/redis/keys.js'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import { createLockClient, LockLostError } from '../../../src/index.js'
import { type RedisServer, startRedis } from '../../servers/redis.js'
import { sleep } from '../../support/time.js'
import { abortedAt } from '../../support/wait.js'

let server: RedisServer
let admin: Redis
const run = randomBytes(3).toString('hex')

before(async () => {
  server = await startRedis()
  admin = new Redis(server.port, '127.0.0.1')
})
after(async () => {
  admin.disconnect()
  await server.destroy()
})

describe('redis batched renewals', { timeout: 60_000 }, () => {
  it('renews in batches; a lock taken over is reported lost, the others stay renewed', async () => {
    const connection = new Redis(server.port, '127.0.0.1')
    const backend = redisBackend({ client: connection })
    const batches: string[][] = []
    const extendMany = backend.extendMany!.bind(backend)
    backend.extendMany = (leases, ttlMs, signal) => {
      batches.push(leases.map((l) => l.key))
      return extendMany(leases, ttlMs, signal)
    }
    const client = createLockClient(backend, { ttl: 1500 })
    try {
      // One key with a brace: its keys include a name key, so the batch's locks have different key counts.
      const keys = Array.from({ length: 20 }, (_, i) => `batch-${run}-${i}${i === 4 ? '{x}' : ''}`)
      const locks = await Promise.all(keys.map((k) => client.acquire(k)))
      const taken = locks[7]!
      // Another owner now holds it (as after an expiry and a new grant).
      await admin.set(redisLockKeys(taken.key).lock, 'someone-else', 'PX', 60_000)
      const { reason } = await abortedAt(taken.signal, 10_000)
      assert.ok(reason instanceof LockLostError)
      assert.ok(
        batches.some((b) => b.length > 1 && b.includes(taken.key)),
        'the lost lock was renewed in a batch with others',
      )
      // Two more renewal periods: every other lock is still ours on the server.
      await sleep(1000)
      for (const lock of locks) {
        if (lock === taken) continue
        assert.equal(lock.signal.aborted, false, lock.key)
        assert.equal((await admin.get(redisLockKeys(lock.key).lock))?.split(' ')[0], lock.owner)
        assert.ok((await admin.pttl(redisLockKeys(lock.key).lock)) > 0)
      }
      assert.equal(await admin.get(redisLockKeys(taken.key).lock), 'someone-else', 'left alone')
      for (const lock of locks) await lock.release()
    } finally {
      await client.close()
      connection.disconnect()
    }
  })

  it('groups a Cluster batch by the slot Redis computes', () => {
    // CLUSTER KEYSLOT's answers, from the Redis documentation and the CRC16 reference input.
    assert.equal(slotOf('foo'), 12182)
    assert.equal(slotOf('bar'), 5061)
    assert.equal(slotOf('123456789'), 0x31c3 % 16_384)
    assert.equal(slotOf('fencelock:{foo}:fence'), slotOf('foo'))
    // An empty tag does not count: the whole name is hashed.
    assert.notEqual(slotOf('{}foo'), slotOf(''))
  })
})
