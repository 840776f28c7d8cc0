/**
 * Multi-key locks in the core, where the conformance cases cannot reach: one deadline for all the keys
 * (not one per key), a store failure part-way naming its key with the others released, a closed client,
 * and withLock's self-deadlock rule applied to every key.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import {
  BackendUnavailableError,
  ClientClosedError,
  createLockClient,
  type LockBackend,
  LockError,
  LockNotAcquiredError,
} from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import { delay, freshMemory, uniqueKey } from './fakes.js'

/** A backend whose attempts at `failing` fail as a wrong password does: at once, not retried. */
function failingAt(inner: LockBackend, failing: string): LockBackend {
  return new Proxy(inner, {
    get(target, name, receiver) {
      if (name !== 'tryAcquire') return Reflect.get(target, name, receiver)
      return (req: { key: string }, signal: AbortSignal) =>
        req.key === failing
          ? Promise.reject(new BackendUnavailableError('the store refused us', { retryable: false }))
          : target.tryAcquire(req as never, signal)
    },
  })
}

describe('multi-key locks in the core', () => {
  it('waits for all the keys within one timeout, not one timeout per key', async () => {
    const backend = freshMemory()
    const [a, b] = [createLockClient(backend), createLockClient(backend)]
    const [first, second] = [`${uniqueKey()}:1`, `${uniqueKey()}:2`].sort()
    const heldFirst = await b.acquire(first!)
    await b.acquire(second!)
    // The first key comes free after 3 s: a timeout per key would then wait 4 s more for the second.
    setTimeout(() => void heldFirst.release(), 3000)
    const start = performance.now()
    const error = await a.acquireAll([first!, second!], { timeout: '4s' }).then(
      () => assert.fail('acquired a key held elsewhere'),
      (e: unknown) => e,
    )
    const elapsed = performance.now() - start
    assert.ok(error instanceof LockNotAcquiredError, `${error}`)
    assert.equal(error.key, second, 'it stopped at the second key')
    // 4 s for both, with 2 s of slack for a loaded machine; per key it would be 7 s.
    assert.ok(elapsed < 6000, `gave up after ${Math.round(elapsed)} ms`)
    assert.equal((await b.inspect(first!)).held, false, 'the first key, taken in between, was released')
    await Promise.all([a.close(), b.close()])
  })

  it('a store failure part-way names its key and keeps its retryable; the keys before it are released', async () => {
    const backend = freshMemory()
    const keys = [`${uniqueKey()}:1`, `${uniqueKey()}:2`].sort()
    const locks = createLockClient(failingAt(backend, keys[1]!))
    const error = await locks.acquireAll(keys).then(
      () => assert.fail('acquired through a failing store'),
      (e: unknown) => e,
    )
    assert.ok(error instanceof BackendUnavailableError, `${error}`)
    assert.equal(error.key, keys[1])
    assert.equal(error.retryable, false)
    assert.match(error.message, /key 2 of 2.*the 1 taken before it were released/)
    const other = createLockClient(backend)
    assert.equal((await other.inspect(keys[0]!)).held, false)
    await Promise.all([locks.close(), other.close()])
  })

  it('a client closed during the acquisition rejects it and leaves no key held', async () => {
    const backend = freshMemory()
    const [a, b] = [createLockClient(backend), createLockClient(backend)]
    const keys = [`${uniqueKey()}:1`, `${uniqueKey()}:2`].sort()
    const held = await b.acquire(keys[1]!)
    const pending = awaitLater(a.acquireAll(keys))
    while (!(await b.inspect(keys[0]!)).held) await delay(5)
    await a.close()
    await assert.rejects(pending, ClientClosedError)
    assert.equal((await b.inspect(keys[0]!)).held, false)
    await held.release()
    await b.close()
  })

  it('inside withLock or withAll, a set holding one of their keys fails at once', async () => {
    const locks = createLockClient(freshMemory())
    const [key, other] = [uniqueKey(), uniqueKey()]
    const selfDeadlock = (e: unknown) => e instanceof LockError && e.code === 'FENCELOCK_SELF_DEADLOCK'
    await locks.withLock(key, async () => {
      await assert.rejects(locks.acquireAll([other, key]), selfDeadlock)
      await assert.rejects(locks.tryAcquireAll([other, key]), selfDeadlock)
      assert.equal((await locks.inspect(other)).held, false, 'refused before taking any key')
    })
    await locks.withAll([key, other], async () => {
      await assert.rejects(
        locks.withAll([other], () => {}),
        selfDeadlock,
      )
    })
    await locks.close()
  })

  it("an atomic set's key whose grant was lost before the take is handed out lost, never held", async () => {
    // A key's `lost` may abort between the store's grant and the core's take: a single acquire gives such
    // a grant back (`#take`); each key of a set becomes a lock of its own, which must report it at once.
    const inner = freshMemory()
    const gone = AbortSignal.abort(new Error('its entry was deleted'))
    const backend = new Proxy(inner, {
      get(target, name, receiver) {
        if (name !== 'multiKey') return Reflect.get(target, name, receiver)
        const facet = target.multiKey!
        return {
          ...facet,
          async tryAcquireAll(reqs: Parameters<typeof facet.tryAcquireAll>[0], signal: AbortSignal) {
            const result = await facet.tryAcquireAll(reqs, signal)
            if (!result.granted) return result
            return {
              granted: true,
              grants: result.grants.map((g, i) => (i === 1 ? { ...g, lost: gone } : g)),
            }
          },
        }
      },
    })
    const locks = createLockClient(backend)
    const [first, second] = [`${uniqueKey()}:1`, `${uniqueKey()}:2`].sort()
    const all = await locks.acquireAll([first!, second!], { atomic: true })
    assert.equal(all.locks.get(second!)!.signal.aborted, true, 'the lost key is lost')
    assert.equal(all.locks.get(first!)!.signal.aborted, false, 'the other key is held')
    await all.release()
    await locks.close()
  })
})
