/**
 * The semaphore's own behaviour in the core, on the memory backend: `withPermits` (given back after the
 * work, after a throw, and the loss reported when the permits were lost during the work), `isMe`, the
 * object kept per name and limit, and the refusal of a backend without the facet. Every backend's
 * semaphore runs the conformance cases (test/conformance) besides.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { memoryBackend } from '../../src/backends/memory/index.js'
import { CapabilityError, createLockClient, LockLostError } from '../../src/index.js'
import { sleep } from '../support/time.js'
import { uniqueKey } from './fakes.js'

const fresh = () => memoryBackend({ name: uniqueKey() })

describe('semaphore', () => {
  it('withPermits holds the permits while the work runs and gives them back after', async () => {
    const locks = createLockClient(fresh())
    const sem = locks.semaphore(uniqueKey(), { limit: 3 })
    const seen = await sem.withPermits(
      async (held) => {
        const view = await sem.inspect()
        assert.equal(held.permits, 2)
        return view
      },
      { permits: 2 },
    )
    assert.equal(seen.held, 2)
    assert.equal(seen.holders[0]?.isMe, true)
    assert.equal((await sem.inspect()).held, 0)
    await locks.close()
  })

  it("withPermits gives them back when the work throws, and rejects with the work's error", async () => {
    const locks = createLockClient(fresh())
    const sem = locks.semaphore(uniqueKey(), { limit: 1 })
    const failure = new Error('the work failed')
    await assert.rejects(
      sem.withPermits(() => {
        throw failure
      }),
      (error) => error === failure,
    )
    assert.equal((await sem.inspect()).held, 0)
    await locks.close()
  })

  it('withPermits rejects with the loss when the permits were lost before the work returned', async () => {
    const locks = createLockClient(fresh(), { ttl: '1s', renew: false })
    const sem = locks.semaphore(uniqueKey(), { limit: 1 })
    await assert.rejects(
      sem.withPermits(async (held) => {
        await sleep(1500)
        assert.ok(held.signal.aborted, 'the lease ended while the work ran')
        return 'done'
      }),
      (error: unknown) => {
        assert.ok(error instanceof LockLostError, `got ${error}`)
        assert.match(error.message, /^Permits of semaphore/)
        return true
      },
    )
    await locks.close()
  })

  it('keeps one object per name and limit; another limit is another object', async () => {
    const locks = createLockClient(fresh())
    const name = uniqueKey()
    const a = locks.semaphore(name, { limit: 2 })
    assert.equal(locks.semaphore(name, { limit: 2 }), a)
    const b = locks.semaphore(name, { limit: 3 })
    assert.notEqual(b, a)
    assert.equal(b.limit, 3)
    await locks.close()
  })

  it('refuses a backend without semaphores before any I/O', async () => {
    const { semaphore: _none, ...plain } = fresh()
    const locks = createLockClient({ ...plain, id: 'memory:plain' })
    await assert.rejects(locks.semaphore(uniqueKey(), { limit: 2 }).acquire(), (error: unknown) => {
      assert.ok(error instanceof CapabilityError)
      assert.match(error.message, /semaphore .* on memory:plain: this backend offers no counting semaphore/)
      return true
    })
    await locks.close()
  })
})
