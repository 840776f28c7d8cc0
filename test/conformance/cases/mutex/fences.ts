import assert from 'node:assert/strict'
import type { ConformanceCase } from '../../harness.js'

export const fenceCases: ConformanceCase[] = [
  {
    name: 'fences strictly increase across successive holders, clients, breaks and expiries',
    async run(ctx) {
      const key = ctx.key('fences')
      const clients = [
        ctx.client({ ttl: '10s' }),
        ctx.client({ ttl: '10s' }),
        ctx.client({ ttl: ctx.ttl(1), renew: false }),
      ]
      const fences: bigint[] = []
      for (let i = 0; i < 12; i++) {
        const lock = await clients[i % 3]!.acquire(key, { timeout: '20s' })
        fences.push(lock.fence)
        if (i % 4 === 1) await ctx.store().breakLease(key)
        else if (i % 3 !== 2) await lock.release()
        // i % 3 === 2: abandoned (no renewal), the next holder waits out its short lease.
      }
      for (let i = 1; i < fences.length; i++) {
        assert.ok(fences[i]! > fences[i - 1]!, `fences not increasing: ${fences.join(', ')}`)
      }
    },
  },

  {
    name: 'keeps fences of different keys independent and positive',
    async run(ctx) {
      const client = ctx.client()
      const a = await client.acquire(ctx.key('fa'))
      const b = await client.acquire(ctx.key('fb'))
      assert.equal(typeof a.fence, 'bigint')
      assert.ok(a.fence > 0n && b.fence > 0n)
      await Promise.all([a.release(), b.release()])
    },
  },
]
