/**
 * The read-write lock's own behaviour in the core, on the memory backend: downgrade's outcomes (a lease no
 * longer ours, an unknown outcome tried again, after a release), `withWrite` releasing a lease its work
 * downgraded, the loss reported by `withRead`, and what a timeout says. Every backend's read-write lock
 * runs the conformance cases (test/conformance) besides.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { memoryBackend } from '../../src/backends/memory/index.js'
import {
  BackendUnavailableError,
  createLockClient,
  type LockBackend,
  LockLostError,
  LockNotAcquiredError,
  LockReleasedError,
  type RwLockFacet,
} from '../../src/index.js'
import { sleep } from '../support/time.js'
import { uniqueKey } from './fakes.js'

const fresh = () => memoryBackend({ name: uniqueKey() })

/** A backend whose read-write lock's `downgrade` is `downgrade`, everything else the memory backend's. */
function withDowngrade(downgrade: RwLockFacet['downgrade']): LockBackend {
  const inner = fresh()
  return { ...inner, rwlock: { ...inner.rwlock, downgrade } }
}

describe('rwlock', () => {
  it('a downgrade the store refuses (the lease is no longer ours) reports the loss', async () => {
    const locks = createLockClient(withDowngrade(async () => ({ downgraded: false })))
    const w = await locks.rwlock(uniqueKey()).write()
    await assert.rejects(w.downgrade(), (error: unknown) => {
      assert.ok(error instanceof LockLostError, `got ${error}`)
      assert.match(error.message, /^Read-write lock/)
      return true
    })
    assert.ok(w.signal.aborted)
    await locks.close()
  })

  it('a downgrade whose outcome is unknown keeps the lease, and can be asked again', async () => {
    const inner = fresh()
    let failures = 1
    const backend: LockBackend = {
      ...inner,
      rwlock: {
        ...inner.rwlock,
        downgrade: async (lease, signal) => {
          // Applied on the store, then the reply is lost: the second call finds it a reader already.
          const result = await inner.rwlock.downgrade(lease, signal)
          if (failures-- > 0) throw new Error('reply lost')
          return result
        },
      },
    }
    const locks = createLockClient(backend)
    const rw = locks.rwlock(uniqueKey())
    const w = await rw.write()
    await assert.rejects(w.downgrade(), BackendUnavailableError)
    assert.equal(w.signal.aborted, false, 'still ours')
    const r = await w.downgrade()
    assert.equal(r.mode, 'read')
    assert.deepEqual(
      (await rw.inspect()).holders.map((h) => h.mode),
      ['read'],
    )
    await r.release()
    await locks.close()
  })

  it('downgrade after release is refused; release of a downgraded write handle leaves the read lease', async () => {
    const locks = createLockClient(fresh())
    const rw = locks.rwlock(uniqueKey())
    const w = await rw.write()
    await w.release()
    await assert.rejects(w.downgrade(), LockReleasedError)
    const w2 = await rw.write()
    const r = await w2.downgrade()
    await w2.release()
    assert.equal((await rw.inspect()).holders.length, 1)
    await r.release()
    assert.equal((await rw.inspect()).holders.length, 0)
    await locks.close()
  })

  it('withWrite releases the lease its work downgraded, also when the work throws', async () => {
    const locks = createLockClient(fresh())
    const rw = locks.rwlock(uniqueKey())
    const failure = new Error('the work failed')
    await assert.rejects(
      rw.withWrite(async (w) => {
        await w.downgrade()
        throw failure
      }),
      (error) => error === failure,
    )
    assert.deepEqual((await rw.inspect()).holders, [])
    await locks.close()
  })

  it('withRead rejects with the loss when the lease was lost before the work returned', async () => {
    const locks = createLockClient(fresh(), { ttl: '1s', renew: false })
    await assert.rejects(
      locks.rwlock(uniqueKey()).withRead(async (r) => {
        await sleep(1500)
        assert.ok(r.signal.aborted, 'the lease ended while the work ran')
      }),
      LockLostError,
    )
    await locks.close()
  })

  it('a timeout says which mode waited, and for what', async () => {
    const locks = createLockClient(fresh())
    const name = uniqueKey()
    const w = await locks.rwlock(name).write()
    await assert.rejects(locks.rwlock(name).read({ timeout: 50 }), (error: unknown) => {
      assert.ok(error instanceof LockNotAcquiredError, `got ${error}`)
      assert.match(error.message, /^Read-write lock .* had a writer ahead of this read/)
      return true
    })
    await w.release()
    await locks.close()
  })
})
