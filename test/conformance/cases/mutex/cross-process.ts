import assert from 'node:assert/strict'
import { awaitLater } from '../../../support/later.js'
import { startHold } from '../../../support/processes.js'
import type { ConformanceCase } from '../../harness.js'

export const crossProcessCases: ConformanceCase[] = [
  {
    name: 'excludes and hands over across processes (fencelock hold)',
    requires: ['processes'],
    async run(ctx) {
      const key = ctx.key('xproc')
      const holder = startHold(ctx.store().url(), key, ['--ttl', '10s'])
      const acquired = await holder.next('acquired')
      const client = ctx.client()
      assert.equal(await client.tryAcquire(key), null, 'another process holds it')
      const waiting = awaitLater(client.acquire(key, { timeout: '20s' }))
      holder.send('release')
      await holder.next('released')
      assert.equal(await holder.exited, 0)
      const lock = await waiting
      assert.ok(lock.fence > BigInt(acquired.fence as string))
      await lock.release()
    },
  },

  {
    name: 'frees the lock of a holder killed with SIGKILL after its ttl (or at once, where the store can tell)',
    requires: ['processes'],
    async run(ctx) {
      if (ctx.kit.capabilities.deadHolder === 'at once') {
        const key = ctx.key('killed-now')
        const holder = startHold(ctx.store().url(), key, ['--ttl', '60s'])
        const acquired = await holder.next('acquired')
        holder.child.kill('SIGKILL')
        await holder.exited
        // Well within the 60 s lease: a generous bound for a loaded machine, not a speed claim.
        const lock = await ctx.client().acquire(key, { timeout: '20s' })
        assert.ok(lock.fence > BigInt(acquired.fence as string))
        await lock.release()
        return
      }
      const key = ctx.key('killed')
      const holder = startHold(ctx.store().url(), key, ['--ttl', `${ctx.ttl(5)}ms`])
      const acquired = await holder.next('acquired')
      holder.child.kill('SIGKILL')
      await holder.exited
      const client = ctx.client()
      assert.equal(await client.tryAcquire(key), null, 'the dead holder keeps its lease until the ttl')
      const started = performance.now()
      const lock = await client.acquire(key, { timeout: '30s' })
      assert.ok(performance.now() - started < 25_000)
      assert.ok(lock.fence > BigInt(acquired.fence as string))
      await lock.release()
    },
  },

  {
    name: 'an abandoned lease (no release) ends by its ttl',
    requires: ['processes'],
    async run(ctx) {
      const key = ctx.key('abandon')
      const holder = startHold(ctx.store().url(), key, ['--ttl', `${ctx.ttl(3)}ms`])
      await holder.next('acquired')
      holder.send('abandon')
      assert.equal(await holder.exited, 0)
      const lock = await ctx.client().acquire(key, { timeout: '30s' })
      await lock.release()
    },
  },
]
