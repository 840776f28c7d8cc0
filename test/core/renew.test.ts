import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { BackendUnavailableError, createLockClient, LockLostError } from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import {
  aborted,
  delay,
  freshMemory,
  scripted,
  settle,
  trackUnhandledRejections,
  uniqueKey,
  waitFor,
} from './fakes.js'

const unhandled = trackUnhandledRejections()
after(async () => {
  await settle()
  assert.deepEqual(unhandled, [], 'no unhandled rejections')
})

describe('renewal', { timeout: 20_000 }, () => {
  it('keeps a lock held well past 3 × ttl, with the same fence', async () => {
    const backend = scripted()
    const client = createLockClient(backend, { ttl: 400 })
    const key = uniqueKey()
    const lock = await client.acquire(key)
    const firstValidUntil = lock.validUntil
    await delay(1300)
    assert.equal(lock.signal.aborted, false)
    const info = await client.inspect(key)
    assert.equal(info.held, true)
    assert.equal(info.owner, lock.owner)
    assert.equal(info.fence, lock.fence)
    assert.equal(await createLockClient(backend).tryAcquire(key), null)
    assert.ok(lock.validUntil > firstValidUntil, 'renewals moved the validity forward')
    assert.ok(lock.validUntil > performance.now())
    assert.ok(backend.of('extend').length >= 3)
    for (const call of backend.of('extend')) {
      assert.equal(call.lease?.owner, lock.owner)
      assert.equal(call.lease?.fence, lock.fence)
    }
    await lock.release()
  })

  it('with renew: false, aborts lock.signal with LockLostError once the validity passes', async () => {
    const backend = scripted()
    const client = createLockClient(backend, { ttl: 200, renew: false })
    const key = uniqueKey()
    const lock = await client.acquire(key)
    const { reason, at } = await aborted(lock.signal)
    assert.ok(reason instanceof LockLostError)
    assert.equal(reason.code, 'FENCELOCK_LOST')
    assert.equal(reason.key, key)
    assert.equal(reason.backend, backend.id)
    assert.ok(at >= lock.validUntil, 'not declared lost before its validity ended')
    assert.equal(backend.of('extend').length, 0, 'never renewed')
    await lock.release()
  })

  it('a per-call renew overrides the client default', async () => {
    const backend = scripted()
    const client = createLockClient(backend, { ttl: 300, renew: false })
    const lock = await client.acquire(uniqueKey(), { renew: true })
    await delay(700)
    assert.equal(lock.signal.aborted, false)
    assert.ok(backend.of('extend').length >= 2)
    await lock.release()
  })

  it('aborts lock.signal with LockLostError when the store says the lease is gone', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: 300 })
    const key = uniqueKey()
    const lock = await client.acquire(key)
    backend.breakLock(key)
    const { reason } = await aborted(lock.signal)
    assert.ok(reason instanceof LockLostError)
    assert.equal(reason.key, key)
    assert.equal(reason.backend, backend.id)
    await lock.release()
  })

  it("aborts lock.signal at once when the grant's session-lost signal aborts (no renewal needed)", async () => {
    const session = new AbortController()
    const backend = scripted({
      async tryAcquire(req, signal, inner) {
        const grant = await inner.tryAcquire(req, signal)
        return grant.granted ? { ...grant, lost: session.signal } : grant
      },
    })
    const client = createLockClient(backend, { ttl: '60s' })
    const lock = await client.acquire(uniqueKey())
    const other = await client.acquire(uniqueKey())
    session.abort(new Error('its etcd lease (session) ended: revoked'))
    const { reason } = await aborted(lock.signal)
    assert.ok(reason instanceof LockLostError)
    assert.match(reason.message, /was lost: its etcd lease \(session\) ended: revoked/)
    assert.ok(other.signal.aborted, 'every lock of the session is told')
    // The renewal (every 20 s) played no part: no extend was sent.
    assert.equal(backend.of('extend').length, 0)
    await lock.release().catch(() => {})
    await other.release().catch(() => {})
    await client.close()
  })

  it('a grant whose session is already lost is never handed out', async () => {
    const session = new AbortController()
    session.abort(new Error('gone'))
    let attempts = 0
    const backend = scripted({
      async tryAcquire(req, signal, inner) {
        const grant = await inner.tryAcquire(req, signal)
        // The first grant comes with a dead session; the retry with a live one.
        return grant.granted && ++attempts === 1 ? { ...grant, lost: session.signal } : grant
      },
    })
    const client = createLockClient(backend, { ttl: '60s' })
    const lock = await client.acquire(uniqueKey(), { timeout: '5s' })
    assert.equal(attempts, 2)
    assert.equal(lock.signal.aborted, false)
    assert.equal(backend.of('release').length, 1, 'the grant on a dead session was released')
    await lock.release()
    await client.close()
  })

  it('declares the lock lost by validUntil when extends keep failing, and keeps trying until then', async () => {
    const outage = new Error('ETIMEDOUT')
    const backend = scripted({
      extend: async () => {
        throw outage
      },
    })
    const ttl = 600
    const client = createLockClient(backend, { ttl })
    const key = uniqueKey()
    const lock = await client.acquire(key)
    const validUntil = lock.validUntil

    await assert.rejects(lock.extend(), (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError, 'an unknown outcome, not a loss')
      assert.equal(error.cause, outage)
      assert.equal(error.key, key)
      return true
    })
    assert.equal(lock.signal.aborted, false, 'one failed extend is not a loss')
    assert.equal(lock.validUntil, validUntil)

    const { reason, at } = await aborted(lock.signal, 10 * ttl)
    assert.ok(reason instanceof LockLostError)
    assert.ok(at >= validUntil, 'not before the validity ended')
    assert.equal(lock.validUntil, validUntil, 'a failed extend never moves the validity')
    assert.ok(backend.of('extend').length >= 3, 'the renewer retried')
    await lock.release()
  })

  it('never renews after release', async () => {
    const backend = scripted()
    const client = createLockClient(backend, { ttl: 60 })
    const lock = await client.acquire(uniqueKey())
    await delay(150)
    assert.ok(backend.of('extend').length > 0, 'the renewer ran')
    await lock.release()
    const extendsAtRelease = backend.of('extend').length
    await delay(300)
    assert.equal(backend.of('extend').length, extendsAtRelease)
    const releaseStarted = backend.of('release')[0]!.startedAt
    for (const call of backend.of('extend')) {
      assert.ok(
        call.endedAt !== undefined && call.endedAt <= releaseStarted,
        'every extend ended before release',
      )
    }
  })

  it('waits for an extend in flight before releasing, and drops one queued behind it', async () => {
    const backend = scripted({
      extend: async (lease, ttlMs, signal, inner) => {
        await delay(100)
        return inner.extend(lease, ttlMs, signal)
      },
    })
    const client = createLockClient(backend, { ttl: '10s' })
    const lock = await client.acquire(uniqueKey(), { renew: false })
    const inFlight = awaitLater(assert.rejects(lock.extend(), { code: 'FENCELOCK_RELEASED' }))
    await waitFor(() => backend.of('extend').length === 1, 'the extend to start')
    const queued = awaitLater(assert.rejects(lock.extend(), { code: 'FENCELOCK_RELEASED' }))
    await lock.release()
    await inFlight
    await queued
    assert.equal(backend.of('extend').length, 1, 'the queued extend never reached the store')
    const [extend] = backend.of('extend')
    const [release] = backend.of('release')
    assert.ok(extend?.endedAt !== undefined && release !== undefined && extend.endedAt <= release.startedAt)
    assert.equal(release.result, true, 'the release was the last word, and it found the lease ours')
  })

  it('a renewal that comes due during an extend to a longer ttl asks for that ttl', async () => {
    const ttl = 12_000
    const longer = 60_000
    const asked: number[] = []
    let opened!: () => void
    const gate = new Promise<void>((resolve) => {
      opened = resolve
    })
    const backend = scripted({
      extend: async (lease, ttlMs, signal, inner) => {
        asked.push(ttlMs)
        if (ttlMs === longer) await gate
        return inner.extend(lease, ttlMs, signal)
      },
    })
    const lock = await createLockClient(backend, { ttl }).acquire(uniqueKey())
    const acquiredAt = performance.now()
    const extended = awaitLater(lock.extend(longer))
    // Held past the renewal due at ttl/3: its timer was set first and is due first, so it has fired (and
    // queued its renewal behind this extend) before this one, however late both run.
    await delay(acquiredAt + ttl / 3 + 500 - performance.now())
    opened()
    assert.equal(await extended, longer)
    await waitFor(
      () => backend.of('extend')[1]?.endedAt !== undefined,
      'the renewal queued behind the extend',
    )
    await settle()
    assert.deepEqual(asked.slice(0, 2), [longer, longer], 'the renewal asks for the ttl the extend set')
    assert.ok(lock.validUntil - performance.now() > ttl, 'the longer lease is still believed')
    await lock.release()
  })

  it('refuses, or renews at a sane pace, a ttl longer than a Node timer can hold (~24.8 days)', async () => {
    const overflows: Error[] = []
    const onWarning = (warning: Error) => {
      if (warning.name === 'TimeoutOverflowWarning') overflows.push(warning)
    }
    process.on('warning', onWarning)
    try {
      const backend = scripted()
      let client: ReturnType<typeof createLockClient>
      try {
        client = createLockClient(backend, { ttl: '2000h' })
      } catch (error) {
        assert.ok(error instanceof TypeError && /`ttl`/.test(error.message), `${error}`)
        return
      }
      const lock = await client.acquire(uniqueKey())
      await delay(100)
      const extendCalls = backend.of('extend').length
      await lock.release()
      assert.equal(extendCalls, 0, 'a 2000 h lease must not be renewed within 100 ms')
      assert.equal(lock.signal.aborted, false)
      assert.deepEqual(overflows, [], 'no timer overflowed')
    } finally {
      process.off('warning', onWarning)
    }
  })

  it('renews in time a lock whose grant arrived late in its lease', async () => {
    const ttl = 300
    let attempts = 0
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        // The reply takes 70% of the lease: still valid on arrival, with ~85 ms of validity left.
        if (++attempts === 1) await delay(210)
        return inner.tryAcquire(req, signal)
      },
    })
    const lock = await createLockClient(backend, { ttl }).acquire(uniqueKey())
    assert.ok(lock.validUntil > performance.now(), 'granted while still valid')
    await delay(600)
    assert.equal(lock.signal.aborted, false, 'renewed before its validity ran out, not declared lost')
    await lock.release()
  })

  it('measures renewed validity from before the extend was sent', async () => {
    const backend = scripted({
      extend: async (lease, ttlMs, signal, inner) => {
        const result = await inner.extend(lease, ttlMs, signal)
        await delay(200) // a slow reply
        return result
      },
    })
    const ttl = 1000
    const client = createLockClient(backend, { ttl })
    const lock = await client.acquire(uniqueKey(), { renew: false })
    await lock.extend()
    const sentAt = backend.of('extend')[0]!.startedAt
    assert.ok(lock.validUntil <= sentAt + ttl - (ttl * 0.01 + 2) + 1e-6, 'not from when the reply came')
    await lock.release()
  })

  it('a renewal confirmed only after validUntil passed does not revive the lock: it is lost', async () => {
    // Under load the extend's reply and the validity's timeout can become due in the same turn of the
    // event loop; the reply must not win by being processed first. Here the reply is held back by
    // blocking the loop itself (as a busy process would), so no timer can run before it lands.
    let lock: Awaited<ReturnType<ReturnType<typeof createLockClient>['acquire']>> | undefined
    const backend = scripted({
      extend: async (lease, ttlMs, signal, inner) => {
        const result = await inner.extend(lease, ttlMs, signal)
        const until = lock!.validUntil + 5
        while (performance.now() < until) {
          // busy: the event loop cannot run the timeout's timer
        }
        return result
      },
    })
    lock = await createLockClient(backend, { ttl: 200 }).acquire(uniqueKey(), { renew: false })
    const before = lock.validUntil
    await assert.rejects(lock.extend(), LockLostError)
    assert.equal(lock.signal.aborted, true, 'lock.signal aborted')
    assert.ok(lock.signal.reason instanceof LockLostError)
    assert.equal(lock.validUntil, before, 'validity not moved by the late renewal')
    await lock.release()
  })

  it('a lock declared lost gives up its renewal in flight at once (before the release that follows)', async () => {
    // The expiry timer and the renewal's timeout fall due at the same instant, in either order; a backend
    // must see the renewal given up before a release sent after the loss, or that release can queue behind
    // a renewal stuck on a dead connection (MySQL's lease connection runs statements in order: found by its
    // partition test). Lost here through the grant's session, so nothing else would abort the renewal yet.
    const session = new AbortController()
    let renewal: AbortSignal | undefined
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        const grant = await inner.tryAcquire(req, signal)
        return grant.granted ? { ...grant, lost: session.signal } : grant
      },
      extend: (_lease, _ttlMs, signal) => {
        renewal = signal
        return new Promise((_resolve, reject) =>
          signal.addEventListener('abort', () => reject(signal.reason)),
        )
      },
    })
    const lock = await createLockClient(backend, { ttl: 3000 }).acquire(uniqueKey())
    await waitFor(() => renewal !== undefined, 'a renewal in flight', { withinMs: 5000 })
    session.abort(new Error('session expired'))
    assert.equal(lock.signal.aborted, true)
    assert.equal(
      renewal!.aborted,
      true,
      'the renewal in flight was given up with the loss, not at its timeout',
    )
    await lock.release()
  })
})
