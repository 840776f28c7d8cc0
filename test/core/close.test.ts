import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ClientClosedError, createLockClient, LockReleasedError } from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import { delay, freshMemory, scripted, uniqueKey, waitFor } from './fakes.js'

const closed = (key?: string) => (error: unknown) => {
  assert.ok(error instanceof ClientClosedError, `expected ClientClosedError, got ${error}`)
  assert.equal(error.code, 'FENCELOCK_CLIENT_CLOSED')
  if (key !== undefined) assert.equal(error.key, key)
  return true
}

describe('close', { timeout: 20_000 }, () => {
  it('rejects pending acquires with ClientClosedError', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    const holder = await createLockClient(backend).acquire(key)
    const client = createLockClient(backend)
    const plain = awaitLater(client.acquire(key, { timeout: '10s' }))
    const withSignal = awaitLater(client.acquire(key, { signal: AbortSignal.timeout(10_000) }))
    const waitingTry = awaitLater(client.tryAcquire(key, { timeout: '10s' }))
    const inWithLock = awaitLater(
      client.withLock(key, () => assert.fail('fn must not run'), { timeout: '10s' }),
    )
    await delay(50)
    await client.close()
    await Promise.all([plain, withSignal, waitingTry, inWithLock].map((p) => assert.rejects(p, closed())))
    assert.equal(holder.signal.aborted, false, "another client's lock is untouched")
    await holder.release()
  })

  it('resolves when the backend fails to close, and when it never answers', async () => {
    for (const close of [
      () => Promise.reject(new Error('connect ETIMEDOUT')),
      () => new Promise<void>(() => {}),
    ]) {
      const backend = { ...scripted(), close }
      const client = createLockClient(backend)
      await (await client.acquire(uniqueKey())).release()
      await client.close()
    }
  })

  it('resolves while the release of a held lock never answers; the lock is then lost to its holder', async () => {
    const backend = scripted({ release: () => new Promise<boolean>(() => {}) })
    const client = createLockClient(backend, { ttl: '60s' })
    const lock = await client.acquire(uniqueKey())
    await client.close()
    assert.equal(lock.signal.aborted, true)
  })

  it('releases held locks, so another client can take them at once', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const keys = [uniqueKey(), uniqueKey()]
    const locks = await Promise.all(keys.map((k) => client.acquire(k)))
    await client.close()
    const other = createLockClient(backend)
    for (const key of keys) {
      const lock = await other.tryAcquire(key)
      assert.ok(lock, `${key} is free after close`)
      await lock.release()
    }
    for (const lock of locks) {
      await assert.rejects(lock.extend(), LockReleasedError)
      await lock.release()
    }
  })

  it('does not release again a lock the user already released', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    const lock = await client.acquire(uniqueKey())
    await lock.release()
    await client.close()
    assert.equal(backend.of('release').length, 1)
  })

  it('rejects every call after close with ClientClosedError naming the key', async () => {
    const client = createLockClient(freshMemory())
    await client.close()
    const key = uniqueKey()
    await assert.rejects(client.acquire(key), closed(key))
    await assert.rejects(client.tryAcquire(key), closed(key))
    await assert.rejects(
      client.withLock(key, () => {}),
      closed(key),
    )
    await assert.rejects(client.inspect(key), closed(key))
  })

  it('is idempotent', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    await client.acquire(uniqueKey())
    await Promise.all([client.close(), client.close()])
    await client.close()
    assert.equal(backend.of('release').length, 1)
  })

  it('closes the backend object too (which closes only what the backend opened itself)', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    await client.acquire(uniqueKey())
    await client.close()
    await client.close()
    assert.equal(backend.of('close').length, 1)
    // The release of the held lock happened before the backend was closed.
    const calls = backend.calls.map((c) => c.op)
    assert.ok(calls.lastIndexOf('release') < calls.indexOf('close'), calls.join(','))
  })

  it('releases a grant that lands after close', async () => {
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        await delay(100)
        return inner.tryAcquire(req, signal)
      },
    })
    const client = createLockClient(backend)
    const key = uniqueKey()
    const pending = awaitLater(client.acquire(key))
    await waitFor(() => backend.of('tryAcquire').length === 1, 'the attempt to start')
    await client.close()
    await assert.rejects(pending, closed())
    await waitFor(() => backend.of('release').length === 1, 'the late grant to be released')
    assert.equal(backend.of('release')[0]?.result, true)
    assert.equal((await backend.inspect(key, AbortSignal.timeout(1000)))?.held, false)
  })

  it('resolves even when the store fails to release', async () => {
    const backend = scripted({
      release: async () => {
        throw new Error('store down')
      },
    })
    const client = createLockClient(backend)
    await client.acquire(uniqueKey())
    await client.close()
    assert.equal(backend.of('release').length, 1)
  })

  it('closes a URL-configured client whose backend failed to load', async () => {
    const client = createLockClient('file://some-host/locks')
    await assert.rejects(client.acquire(uniqueKey()), TypeError)
    await client.close()
  })
})
