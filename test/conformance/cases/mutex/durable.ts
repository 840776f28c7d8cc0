import assert from 'node:assert/strict'
import { startHold } from '../../../support/processes.js'
import type { ConformanceCase } from '../../harness.js'

/**
 * Fences never go back, also across a restart of every server of the store: the grant after it (in a new
 * process, which knows nothing of the grants before) gets a larger fence than the grants before. Runs last
 * (see suite.ts): the store is restarted under it.
 */
export const durableCases: ConformanceCase[] = [
  {
    name: 'fences keep increasing across a restart of the store, for a new process',
    requires: ['durableFences', 'processes'],
    async run(ctx) {
      const key = ctx.key('durable')
      const client = ctx.client()
      let last = 0n
      for (let i = 0; i < 3; i++) {
        const lock = await client.acquire(key)
        last = lock.fence
        await lock.release()
      }
      await client.close()
      await ctx.store().restart!()
      const holder = startHold(ctx.store().url(), key, ['--ttl', '10s'])
      const acquired = await holder.next('acquired', 60_000)
      holder.send('release')
      await holder.next('released')
      assert.equal(await holder.exited, 0)
      const after = BigInt(acquired.fence as string)
      assert.ok(after > last, `fence ${after} after the restart is not above ${last} before it`)
    },
  },
]
