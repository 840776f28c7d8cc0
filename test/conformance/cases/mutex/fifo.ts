import assert from 'node:assert/strict'
import type { Lock } from '../../../../src/index.js'
import type { ConformanceCase } from '../../harness.js'
import { wrapBackend } from '../../wrap.js'

const WAITERS = 5

/**
 * Arrival order: each waiter starts once the one before it is in line (its first attempt was refused and it
 * waits), then the holder leaves; the lock must go to the waiters in the order they came. A store that lets
 * released keys be raced for passes this only by chance (1 in 120).
 */
export const fifoCases: ConformanceCase[] = [
  {
    name: 'grants waiters in their arrival order',
    requires: ['fifo'],
    async run(ctx) {
      const key = ctx.key('fifo')
      const holder = await ctx.client({ ttl: '30s' }).acquire(key)
      const order: number[] = []
      const done: Array<Promise<void>> = []
      for (let i = 0; i < WAITERS; i++) {
        let inLine: () => void = () => {}
        const waiting = new Promise<void>((resolve) => {
          inLine = resolve
        })
        const inner = await ctx.backend()
        const backend = wrapBackend(inner, {
          waitForChange(req, signal) {
            inLine()
            return inner.waitForChange!(req, signal)
          },
        })
        const acquired = ctx
          .client({ ttl: '30s' }, backend)
          .acquire(key, { timeout: '30s' })
          .then(async (lock: Lock) => {
            order.push(i)
            await lock.release()
          })
        done.push(acquired)
        // An acquire that fails before it waits ends the case with its error rather than a hang.
        await Promise.race([waiting, acquired])
      }
      await holder.release()
      await Promise.all(done)
      assert.deepEqual(order, [...Array(WAITERS).keys()], 'the waiters were not granted in arrival order')
    },
  },
]
