import assert from 'node:assert/strict'
import { setImmediate as tick } from 'node:timers/promises'
import { LockReleasedError } from '../../../../src/index.js'
import type { ConformanceCase } from '../../harness.js'

export const exclusivityCases: ConformanceCase[] = [
  {
    name: 'grants one holder at a time among 50 concurrent contenders on 5 clients',
    async run(ctx) {
      const key = ctx.key('exclusive')
      const clients = Array.from({ length: 5 }, () => ctx.client({ ttl: '10s' }))
      let inside = 0
      let maxInside = 0
      const fences: bigint[] = []
      await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          clients[i % clients.length]!.withLock(key, async (lock) => {
            inside++
            maxInside = Math.max(maxInside, inside)
            fences.push(lock.fence)
            // Yield several times inside the critical section so an overlapping grant would be seen.
            for (let n = 0; n < 3; n++) await tick()
            inside--
          }),
        ),
      )
      assert.equal(maxInside, 1, 'two holders were inside the critical section at once')
      assert.equal(fences.length, 50)
      for (let i = 1; i < fences.length; i++) {
        assert.ok(fences[i]! > fences[i - 1]!, `fence ${fences[i]} after ${fences[i - 1]} is not larger`)
      }
    },
  },

  {
    name: 'release is idempotent and frees the key for others',
    async run(ctx) {
      const key = ctx.key('release')
      const [a, b] = [ctx.client(), ctx.client()]
      const lock = await a.acquire(key)
      await lock.release()
      await lock.release()
      await Promise.all([lock.release(), lock.release()])
      assert.equal(lock.signal.aborted, false, 'a normal release must not abort lock.signal')
      const next = await b.tryAcquire(key)
      assert.ok(next, 'the key should be free after release')
      await assert.rejects(lock.extend(), LockReleasedError)
      // The stale handle's release must not free the new holder's lease.
      await lock.release()
      assert.equal(await a.tryAcquire(key), null)
      await next?.release()
    },
  },

  {
    name: 'a stale handle cannot release or extend the next holder',
    async run(ctx) {
      const key = ctx.key('stale')
      const [a, b] = [ctx.client({ ttl: ctx.ttl(1), renew: false }), ctx.client()]
      const stale = await a.acquire(key)
      // Wait out its lease without renewing; the next holder takes over.
      const next = await b.acquire(key, { timeout: ctx.ttl(1) + 10_000 })
      assert.ok(next.fence > stale.fence)
      await stale.release()
      await assert.rejects(
        stale.extend(),
        (error: Error) => error.name === 'LockLostError' || error.name === 'LockReleasedError',
      )
      const info = await b.inspect(key)
      assert.equal(info.held, true)
      assert.equal(info.owner, next.owner)
      await next?.release()
    },
  },

  {
    name: 'inspect shows the holder and its fence, and a free key after release',
    async run(ctx) {
      const key = ctx.key('inspect')
      const client = ctx.client({ ttl: '20s' })
      const before = await client.inspect(key)
      assert.equal(before.held, false)
      const lock = await client.acquire(key)
      const info = await client.inspect(key)
      assert.equal(info.held, true)
      assert.equal(info.owner, lock.owner)
      assert.equal(info.fence, lock.fence)
      assert.ok(info.expiresInMs !== undefined && info.expiresInMs > 0 && info.expiresInMs <= 20_000)
      await lock.release()
      assert.equal((await client.inspect(key)).held, false)
    },
  },

  {
    name: 'keeps validUntil within the lease measured from before the request',
    async run(ctx) {
      const key = ctx.key('validity')
      const client = ctx.client({ ttl: '5s' })
      const before = performance.now()
      const lock = await client.acquire(key)
      const after = performance.now()
      const margin = 5000 * 0.01 + 2
      assert.ok(
        lock.validUntil >= before + 5000 - margin,
        `validUntil ${lock.validUntil} earlier than the lease allows`,
      )
      assert.ok(
        lock.validUntil <= after + 5000 - margin,
        `validUntil ${lock.validUntil} later than the lease allows`,
      )
      await lock.release()
    },
  },
]
