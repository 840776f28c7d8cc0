import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createLockClient } from '../../src/index.js'
import { delay, freshMemory, scripted, uniqueKey } from './fakes.js'

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
