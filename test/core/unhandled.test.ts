/**
 * Nothing the core starts on its own (renewers, late releases, wake-up hints, backend loading) may end in
 * an unhandled rejection: in Node that kills the process. Each scenario runs, then a few turns of the
 * event loop pass, then nothing may have been reported.
 */
import assert from 'node:assert/strict'
import { afterEach, describe, it } from 'node:test'
import { BackendUnavailableError, ClientClosedError, createLockClient } from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import {
  aborted,
  delay,
  freshMemory,
  scripted,
  settle,
  trackUnhandledRejections,
  uniqueKey,
} from './fakes.js'

const unhandled = trackUnhandledRejections()

afterEach(async () => {
  await settle()
  assert.deepEqual(unhandled, [], 'no unhandled rejections')
})

const fail = (message: string) => async (): Promise<never> => {
  throw new Error(message)
}

describe('no unhandled rejections', { timeout: 20_000 }, () => {
  it('when extends keep failing until the lock is lost', async () => {
    const backend = scripted({ extend: fail('ETIMEDOUT') })
    const lock = await createLockClient(backend, { ttl: 100 }).acquire(uniqueKey())
    await aborted(lock.signal)
    await lock.release()
  })

  it('when release fails, in every way a release happens', async () => {
    const backend = scripted({ release: fail('ECONNRESET') })
    const client = createLockClient(backend)
    const lock = await client.acquire(uniqueKey())
    await assert.rejects(lock.release(), BackendUnavailableError)
    await assert.rejects(lock.release(), BackendUnavailableError, 'the same outcome again')
    await assert.rejects(
      client.withLock(uniqueKey(), () => {}),
      BackendUnavailableError,
    )
    await assert.rejects(client.withLock(uniqueKey(), fail('work failed')), /work failed/)
    await client.acquire(uniqueKey())
    await client.close()
  })

  it('when the lease is lost and its release then fails', async () => {
    const backend = scripted({ release: fail('ECONNRESET') })
    const key = uniqueKey()
    const lock = await createLockClient(backend, { ttl: 100 }).acquire(key)
    backend.inner.breakLock(key)
    await aborted(lock.signal)
    await lock.release()
  })

  it('when the client closes with held locks and pending acquires', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: 100 })
    const key = uniqueKey()
    await client.acquire(key)
    const pending = [
      awaitLater(client.acquire(key, { timeout: '10s' })),
      awaitLater(client.tryAcquire(key, { signal: AbortSignal.timeout(10_000), timeout: '10s' })),
    ]
    await delay(30)
    await client.close()
    for (const p of pending) await assert.rejects(p, ClientClosedError)
    await delay(250)
  })

  it('when an attempt is aborted and the late reply is a grant whose release fails, or an error', async () => {
    for (const outcome of ['grant', 'error'] as const) {
      const backend = scripted({
        tryAcquire: async (req, signal, inner) => {
          await delay(50)
          if (outcome === 'error') throw new Error('late failure')
          return inner.tryAcquire(req, signal)
        },
        release: fail('ECONNRESET'),
      })
      const controller = new AbortController()
      const pending = awaitLater(
        createLockClient(backend).acquire(uniqueKey(), { signal: controller.signal }),
      )
      await delay(10)
      controller.abort(new Error('cancel'))
      await assert.rejects(pending, /cancel/)
      await delay(100)
    }
  })

  it('when a stale grant cannot be released', async () => {
    let attempts = 0
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        if (++attempts === 1) await delay(80)
        return inner.tryAcquire(req, signal)
      },
      release: fail('ECONNRESET'),
    })
    const lock = await createLockClient(backend, { ttl: 50 }).tryAcquire(uniqueKey())
    assert.equal(lock, null)
  })

  it('when the wake-up hint fails', async () => {
    const backend = scripted({ waitForChange: fail('subscription dropped') })
    const client = createLockClient(backend)
    const key = uniqueKey()
    const holder = await client.acquire(key)
    await assert.rejects(client.acquire(key, { timeout: 100 }), { code: 'FENCELOCK_NOT_ACQUIRED' })
    await holder.release()
  })

  it('when abandon fails after an acquire gives up', async () => {
    const backend = scripted({ abandon: fail('ECONNRESET') })
    const client = createLockClient(backend)
    const key = uniqueKey()
    const holder = await client.acquire(key)
    assert.equal(await client.tryAcquire(key), null)
    await assert.rejects(client.acquire(key, { timeout: 50 }), { code: 'FENCELOCK_NOT_ACQUIRED' })
    await holder.release()
    assert.equal(backend.of('abandon').length, 2)
  })

  it('when a URL-configured backend fails to load and is never used', async () => {
    createLockClient('file://some-host/locks')
    const used = createLockClient('file://some-host/locks')
    await delay(20)
    await used.close()
  })
})
