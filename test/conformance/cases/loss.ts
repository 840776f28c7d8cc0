import assert from 'node:assert/strict'
import { it } from 'node:test'
import { LockLostError } from '../../../src/index.js'
import { abortedWithin } from '../../support/wait.js'
import type { CaseContext } from '../harness.js'

export function lossCases(ctx: CaseContext): void {
  it('aborts lock.signal with LockLostError when the lease is broken behind the holder', async () => {
    const key = ctx.key('loss')
    const [a, b] = [ctx.client({ ttl: '900ms' }), ctx.client()]
    const lock = await a.acquire(key)
    await ctx.harness.breakLease(key)
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
  })

  it('keeps a renewed lock past several ttls, then releases it', async () => {
    const key = ctx.key('renew')
    const [a, b] = [ctx.client({ ttl: '300ms' }), ctx.client()]
    const lock = await a.acquire(key)
    await new Promise((r) => setTimeout(r, 1200))
    assert.equal(lock.signal.aborted, false, `lost: ${lock.signal.reason}`)
    assert.equal(await b.tryAcquire(key), null, 'a renewed lock must stay held')
    await lock.release()
    const next = await b.tryAcquire(key)
    assert.ok(next)
    await next?.release()
  })

  it('extend moves validUntil forward', async () => {
    const key = ctx.key('extend')
    const client = ctx.client({ ttl: '2s', renew: false })
    const lock = await client.acquire(key)
    const first = lock.validUntil
    await new Promise((r) => setTimeout(r, 50))
    await lock.extend('5s')
    assert.ok(lock.validUntil > first + 2000, 'extend to 5 s should push validity beyond the 2 s lease')
    await lock.release()
  })
}
