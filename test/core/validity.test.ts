import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { BackendUnavailableError, createLockClient, LockLostError } from '../../src/index.js'
import { aborted, delay, freshMemory, scripted, uniqueKey, waitFor } from './fakes.js'

/** Redlock's MIN_VALIDITY margin: the drift share of the ttl plus 2 ms. */
const margin = (ttl: number, driftFactor = 0.01) => ttl * driftFactor + 2

describe('validity', { timeout: 20_000 }, () => {
  for (const driftFactor of [0.01, 0.1, 0]) {
    it(`is the ttl less the drift margin (driftFactor ${driftFactor}), counted from the attempt`, async () => {
      const ttl = 1000
      const client = createLockClient(freshMemory(), { ttl, driftFactor })
      const before = performance.now()
      const lock = await client.acquire(uniqueKey(), { renew: false })
      const after = performance.now()
      assert.ok(lock.validUntil >= before + ttl - margin(ttl, driftFactor))
      assert.ok(lock.validUntil <= after + ttl - margin(ttl, driftFactor))
      assert.ok(lock.validUntil > after)
      await lock.release()
    })
  }

  it('is counted from before the request was sent, not from the reply', async () => {
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        await delay(200)
        return inner.tryAcquire(req, signal)
      },
    })
    const ttl = 1000
    const client = createLockClient(backend, { ttl })
    const lock = await client.acquire(uniqueKey(), { renew: false })
    const sentAt = backend.of('tryAcquire')[0]!.startedAt
    assert.ok(lock.validUntil <= sentAt + ttl - margin(ttl) + 1e-6)
    await lock.release()
  })

  it("uses the lease the store granted, when it differs from the request's", async () => {
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        const grant = await inner.tryAcquire({ ...req, ttlMs: 500 }, signal)
        return grant.granted ? { ...grant, ttlMs: 500 } : grant
      },
    })
    const client = createLockClient(backend, { ttl: 1000 })
    const lock = await client.acquire(uniqueKey(), { renew: false })
    const sentAt = backend.of('tryAcquire')[0]!.startedAt
    assert.ok(lock.validUntil <= sentAt + 500 - margin(500) + 1e-6)
    await lock.release()
  })

  it('shrinks when extend shortens the lease, so no one else is granted it inside our validity', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    const first = await createLockClient(backend, { ttl: '10s' }).acquire(key, { renew: false })
    const extendStart = performance.now()
    await first.extend(100)
    assert.ok(
      first.validUntil <= performance.now() + 100,
      `validUntil ${first.validUntil - extendStart} ms ahead`,
    )

    const second = await createLockClient(backend).acquire(key, { timeout: '5s' })
    const grantedAt = performance.now()
    assert.ok(
      first.signal.aborted || grantedAt >= first.validUntil,
      `a second owner was granted the lock ${Math.round(first.validUntil - grantedAt)} ms inside the first's validity`,
    )
    await second.release()
    await first.release()
  })

  describe('a reply lost after the store applied the request', () => {
    const lostReply = new Error('ETIMEDOUT (the reply was lost; the request was applied)')
    /** Extends and releases that land on the store, whose replies never arrive. */
    const repliesLost = () =>
      scripted({
        extend: async (lease, ttlMs, signal, inner) => {
          await inner.extend(lease, ttlMs, signal)
          throw lostReply
        },
        release: async (lease, signal, inner) => {
          await inner.release(lease, signal)
          throw lostReply
        },
      })

    it('a shorter extend shrinks the validity to what it asked: no waiter gets in while we believe we hold', async () => {
      const backend = repliesLost()
      const key = uniqueKey()
      const first = await createLockClient(backend, { ttl: '30s' }).acquire(key, { renew: false })
      await assert.rejects(first.extend(300), BackendUnavailableError)
      const extendStart = backend.of('extend')[0]!.startedAt
      assert.ok(
        first.validUntil <= extendStart + 300 - margin(300) + 1e-6,
        `validUntil ${Math.round(first.validUntil - extendStart)} ms after the extend began, which asked 300`,
      )
      const second = await createLockClient(backend.inner).acquire(key, { timeout: '10s' })
      const grantedAt = performance.now()
      assert.ok(
        grantedAt >= first.validUntil,
        `granted to a second owner ${Math.round(first.validUntil - grantedAt)} ms inside the first's validity`,
      )
      assert.ok(first.signal.aborted, 'the holder was told')
      await second.release()
    })

    it('a longer extend keeps the validity it had', async () => {
      const backend = repliesLost()
      const first = await createLockClient(backend, { ttl: 500 }).acquire(uniqueKey(), { renew: false })
      const before = first.validUntil
      await assert.rejects(first.extend('30s'), BackendUnavailableError)
      assert.equal(first.validUntil, before)
      const { reason, at } = await aborted(first.signal, 10_000)
      assert.ok(reason instanceof LockLostError)
      assert.ok(at >= before, 'lost at the old validity, not before')
    })

    it('a renewal retries with the ttl of an extend whose outcome was unknown', async () => {
      const asked: number[] = []
      const backend = scripted({
        extend: async (lease, ttlMs, signal, inner) => {
          asked.push(ttlMs)
          await inner.extend(lease, ttlMs, signal)
          throw lostReply
        },
      })
      const lock = await createLockClient(backend, { ttl: '30s' }).acquire(uniqueKey())
      await assert.rejects(lock.extend(600), BackendUnavailableError)
      await waitFor(() => asked.length >= 2, 'the renewer to retry', { withinMs: 10_000 })
      assert.deepEqual(asked.slice(0, 2), [600, 600])
      await lock.release()
    })

    it('a release counts nothing as ours once it is sent: validUntil is no later than its start', async () => {
      const backend = repliesLost()
      const key = uniqueKey()
      const first = await createLockClient(backend, { ttl: '30s' }).acquire(key, { renew: false })
      const releaseStart = performance.now()
      await assert.rejects(first.release(), BackendUnavailableError)
      assert.ok(first.validUntil <= performance.now() && first.validUntil >= releaseStart)
      const second = await createLockClient(backend.inner).tryAcquire(key)
      assert.ok(second, 'the release landed: the lock is free')
      assert.ok(performance.now() >= first.validUntil)
      await second.release()
    })
  })

  it('lock.signal read after a blocked event loop passed validUntil is aborted, before any timer ran', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    for (const renew of [false, true]) {
      const lock = await createLockClient(backend, { ttl: 200 }).acquire(key, { renew })
      // Busy: neither the renewal nor the expiry timer can run.
      while (performance.now() <= lock.validUntil + 5) {}
      assert.equal(lock.signal.aborted, true, `renew: ${renew}`)
      assert.ok(lock.signal.reason instanceof LockLostError)
      await lock.release()
    }
  })

  describe('a grant that arrives after its validity', () => {
    const ttl = 100
    /** The first attempt replies only after a whole lease has passed; later attempts are prompt. */
    const slowFirstReply = () => {
      let attempts = 0
      return scripted({
        tryAcquire: async (req, signal, inner) => {
          if (++attempts === 1) await delay(ttl + 50)
          return inner.tryAcquire(req, signal)
        },
      })
    }

    it('is released and not returned by tryAcquire', async () => {
      const slow = slowFirstReply()
      const client = createLockClient(slow, { ttl })
      const key = uniqueKey()
      assert.equal(await client.tryAcquire(key), null)
      const [stale] = slow.of('tryAcquire')
      const [release] = slow.of('release')
      assert.ok(stale?.result && (stale.result as { granted: boolean }).granted, 'the store did grant it')
      assert.equal(release?.lease?.owner, stale.req?.owner)
      assert.equal(release?.result, true, 'the stale grant was still in the store, and was freed')
      assert.equal((await client.inspect(key)).held, false)
    })

    it('is released before acquire tries again, which then gets a fresh grant', async () => {
      const slow = slowFirstReply()
      const client = createLockClient(slow, { ttl })
      const key = uniqueKey()
      const lock = await client.acquire(key, { timeout: '5s', renew: false })
      const attempts = slow.of('tryAcquire')
      const [release] = slow.of('release')
      const staleFence = (attempts[0]?.result as { fence: bigint }).fence
      assert.ok(release?.endedAt !== undefined && attempts[1] && release.endedAt <= attempts[1].startedAt)
      assert.ok(lock.fence > staleFence, 'a new grant, not the stale one found again')
      assert.ok(lock.validUntil > performance.now())
      await lock.release()
    })
  })
})
