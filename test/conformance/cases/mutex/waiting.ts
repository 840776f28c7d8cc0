import assert from 'node:assert/strict'
import { LockNotAcquiredError } from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import { pollUntil } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

export const waitingCases: ConformanceCase[] = [
  {
    name: 'tryAcquire returns null at once and acquire times out while the key is held',
    async run(ctx) {
      const key = ctx.key('timeout')
      const [a, b] = [ctx.client({ ttl: '30s' }), ctx.client()]
      const lock = await a.acquire(key)
      assert.equal(await b.tryAcquire(key), null)
      const started = performance.now()
      await assert.rejects(b.acquire(key, { timeout: '300ms' }), (error: unknown) => {
        if (!(error instanceof LockNotAcquiredError)) return false
        assert.equal(error.key, key)
        assert.match(error.message, /held by another owner/)
        return true
      })
      assert.ok(performance.now() - started >= 290, 'gave up before its timeout')
      await lock.release()
    },
  },

  {
    name: 'an aborted wait rejects with signal.reason and leaves no lease behind',
    async run(ctx) {
      const key = ctx.key('abort')
      const [a, b] = [ctx.client({ ttl: '30s' }), ctx.client()]
      const lock = await a.acquire(key)
      const controller = new AbortController()
      const reason = new Error('stop waiting')
      const waiting = b.acquire(key, { signal: controller.signal })
      setTimeout(() => controller.abort(reason), 100)
      await assert.rejects(waiting, (error: unknown) => error === reason)
      await assert.rejects(
        b.acquire(key, { signal: AbortSignal.abort(reason) }),
        (error: unknown) => error === reason,
      )
      await lock.release()
      // The abort rejects at once, as asked; the waiter's clean-up (its queue entry on etcd and
      // ZooKeeper) goes on in the background and may land a moment after this release. What must not
      // happen is the waiter keeping the key: for its ttl (30 s here), or, on a session store, as long
      // as its client lives.
      const next = await pollUntil(
        () => a.tryAcquire(key),
        (lock) => lock !== null,
        { withinMs: 5000, everyMs: 50 },
      )
      assert.ok(next, 'the aborted waiter must not have kept the lock')
      await next?.release()
    },
  },

  {
    name: 'wakes a blocked waiter when the holder releases, long before the lease would end',
    async run(ctx) {
      const key = ctx.key('wake')
      const [a, b] = [ctx.client({ ttl: '60s' }), ctx.client({ ttl: '60s' })]
      const lock = await a.acquire(key)
      const waiting = awaitLater(b.acquire(key, { timeout: '30s' }))
      await sleep(200)
      const releasedAt = performance.now()
      await lock.release()
      const next = await waiting
      // Generous: the point is that it did not wait for the 60 s lease.
      assert.ok(performance.now() - releasedAt < 10_000)
      assert.ok(next.fence > lock.fence)
      await next?.release()
    },
  },

  {
    name: 'gives an expired lease to a waiter without any release',
    async run(ctx) {
      const key = ctx.key('expire')
      const [a, b] = [ctx.client({ ttl: ctx.ttl(2), renew: false }), ctx.client()]
      const lock = await a.acquire(key)
      const next = await b.acquire(key, { timeout: '20s' })
      assert.ok(next.fence > lock.fence)
      await next?.release()
    },
  },
]
