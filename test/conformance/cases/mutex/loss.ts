import assert from 'node:assert/strict'
import { LockLostError } from '../../../../src/index.js'
import { sleep } from '../../../support/time.js'
import { abortedWithin } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

export const lossCases: ConformanceCase[] = [
  {
    name: 'aborts lock.signal with LockLostError when the lease is broken behind the holder',
    async run(ctx) {
      const key = ctx.key('loss')
      const [a, b] = [ctx.client({ ttl: ctx.ttl(3) }), ctx.client()]
      const lock = await a.acquire(key)
      await ctx.store().breakLease(key)
      const next = await b.acquire(key, { timeout: '20s' })
      await abortedWithin(lock.signal, 20_000)
      assert.ok(lock.signal.reason instanceof LockLostError)
      assert.equal(lock.signal.reason.key, key)
      assert.ok(next.fence > lock.fence)
      await assert.rejects(lock.extend(), LockLostError)
      // Releasing a lost lock is harmless and leaves the new holder in place.
      await lock.release()
      assert.equal((await b.inspect(key)).owner, next.owner)
      await next?.release()
    },
  },

  {
    // The store ended the lease: its holder's next renewal, however soon, must not bring it back. Else a
    // lease that ran out (a paused holder, a premature expiry) is revived by a renewal that lands before any
    // waiter's attempt, and the holder is never told that its lock was free in between.
    name: "a lease the store ended is not revived by its holder's next renewal",
    async run(ctx) {
      const key = ctx.key('revive')
      const client = ctx.client({ ttl: ctx.ttl(3), renew: false })
      const lock = await client.acquire(key)
      await ctx.store().breakLease(key)
      await assert.rejects(lock.extend(), LockLostError)
      assert.ok(lock.signal.reason instanceof LockLostError)
      const next = await ctx.client().tryAcquire(key)
      assert.ok(next, 'the ended lease must leave the key free')
      assert.ok(next.fence > lock.fence)
      await next.release()
    },
  },

  {
    name: 'keeps a renewed lock past several ttls, then releases it',
    async run(ctx) {
      const key = ctx.key('renew')
      // At least 1 s: a lease of the stores' 300 ms minimum is renewed every 100 ms, which a loaded machine's
      // event loop cannot promise, and this case is about renewal working, not about its margin.
      const ttl = Math.max(1000, ctx.ttl(1))
      const [a, b] = [ctx.client({ ttl }), ctx.client()]
      const lock = await a.acquire(key)
      await sleep(3 * ttl)
      assert.equal(lock.signal.aborted, false, `lost: ${lock.signal.reason}`)
      assert.equal(await b.tryAcquire(key), null, 'a renewed lock must stay held')
      await lock.release()
      const next = await b.tryAcquire(key)
      assert.ok(next)
      await next?.release()
    },
  },

  {
    name: 'extend moves validUntil forward',
    requires: ['longerExtend'],
    async run(ctx) {
      const key = ctx.key('extend')
      // 2 s and 5 s where the store honours short ttls.
      const lease = Math.max(2000, ctx.ttl(2))
      const client = ctx.client({ ttl: lease, renew: false })
      const lock = await client.acquire(key)
      const first = lock.validUntil
      await sleep(50)
      await lock.extend(2.5 * lease)
      assert.ok(
        lock.validUntil > first + lease,
        'extend to 2.5 leases should push validity beyond the first lease',
      )
      await lock.release()
    },
  },

  {
    name: 'extend resolves with the lease granted: the ttl asked, or less where the store caps it',
    async run(ctx) {
      const key = ctx.key('extend-granted')
      const lease = Math.max(2000, ctx.ttl(2))
      const lock = await ctx.client({ ttl: lease, renew: false }).acquire(key)
      const asked = 2.5 * lease
      const granted = await lock.extend(asked)
      assert.equal(typeof granted, 'number', 'extend resolves with the lease granted')
      assert.ok(
        Number.isInteger(granted) && granted > 0 && granted <= asked,
        `granted ${granted} of ${asked}`,
      )
      // What the holder counts is what was granted, never the ttl asked.
      assert.ok(lock.remainingMs <= granted, `remainingMs ${lock.remainingMs} > granted ${granted}`)
      if (ctx.kit.capabilities.longerExtend)
        assert.ok(granted >= 0.9 * asked, `granted ${granted} of ${asked}`)
      else assert.ok(granted < asked, `a store that caps the lease granted ${granted} of ${asked}`)
      await lock.release()
    },
  },
]
