import assert from 'node:assert/strict'
import { LockLostError } from '../../../../src/index.js'
import { abortedWithin } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

/**
 * Session loss: the store ends the session behind a holder's key (etcd: its lease revoked). The backend
 * reports it through `Grant.lost`, and the core aborts `lock.signal` at once. The ttl is 60 s, so neither
 * the lease's end nor the first renewal (a third of the ttl in) can be what ended it within 10 s.
 */
export const sessionCases: ConformanceCase[] = [
  {
    name: 'aborts lock.signal promptly with LockLostError when the holder loses its session',
    requires: ['session'],
    async run(ctx) {
      const key = ctx.key('session')
      const lock = await ctx.client({ ttl: '60s' }).acquire(key)
      await ctx.store().loseSession!(key)
      await abortedWithin(lock.signal, 10_000)
      assert.ok(lock.signal.reason instanceof LockLostError, `aborted with ${lock.signal.reason}`)
      assert.equal(lock.signal.reason.key, key)
      const next = await ctx.client().acquire(key, { timeout: '20s' })
      assert.ok(next.fence > lock.fence)
      await lock.release()
      assert.equal((await ctx.client().inspect(key)).owner, next.owner, 'the lost lock released the next one')
      await next.release()
    },
  },
]
