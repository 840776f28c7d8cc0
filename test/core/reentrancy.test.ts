/**
 * Locks are not reentrant. An acquire of a key inside `withLock` of the same key, on the same client and
 * in the same async context, would wait for itself for ever: it fails at once. Everything else waits
 * as usual (another task of the same client may well release the key).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createLockClient, LockError } from '../../src/index.js'
import { freshMemory, uniqueKey } from './fakes.js'

const selfDeadlock = (error: unknown) => {
  assert.ok(error instanceof LockError, `expected a LockError, got ${error}`)
  assert.equal(error.code, 'FENCELOCK_SELF_DEADLOCK')
  assert.match(error.message, /not reentrant/)
  return true
}

describe('no silent self-deadlock', () => {
  it('acquire and tryAcquire of the key inside its own withLock fail at once', async () => {
    const locks = createLockClient(freshMemory())
    const key = uniqueKey()
    await locks.withLock(key, async () => {
      await assert.rejects(locks.acquire(key), selfDeadlock)
      await assert.rejects(locks.tryAcquire(key), selfDeadlock)
      // Also nested deeper, inside another key's withLock and after an await.
      await locks.withLock(uniqueKey(), async () => {
        await new Promise((resolve) => setTimeout(resolve, 1))
        await assert.rejects(
          locks.withLock(key, () => {}),
          selfDeadlock,
        )
      })
    })
    await locks.close()
  })

  it('other keys, other clients and other tasks of the same client are not refused', async () => {
    const backend = freshMemory()
    const locks = createLockClient(backend)
    const key = uniqueKey()
    // A task of the same client, started outside withLock: it asks for the key while withLock holds it,
    // waits, and gets it after the release.
    let open!: () => void
    const gate = new Promise<void>((resolve) => {
      open = resolve
    })
    const task = gate.then(() => locks.acquire(key, { timeout: '10s' }))
    task.catch(() => {})
    await locks.withLock(key, async () => {
      const other = await locks.acquire(uniqueKey())
      await other.release()
      assert.equal(
        await createLockClient(backend).tryAcquire(key),
        null,
        'another client is refused as usual',
      )
      open()
      await new Promise((resolve) => setTimeout(resolve, 20))
    })
    const later = await task
    await later.release()
    await locks.close()
  })

  it('remainingMs counts down while held and is 0 once released', async () => {
    const locks = createLockClient(freshMemory(), { ttl: '30s' })
    const lock = await locks.acquire(uniqueKey())
    assert.ok(lock.remainingMs > 20_000 && lock.remainingMs <= 30_000, `${lock.remainingMs}`)
    await lock.release()
    assert.equal(lock.remainingMs, 0)
    await locks.close()
  })
})
