/**
 * How the acquire loop meets a failing store: it never spins (every retry after a failure waits on a real
 * timer), it honours the deadline and the caller's signal during an outage, it counts a grant's validity
 * from the earliest attempt that could have set it, and it cleans up after attempts whose outcome it never
 * learned.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { BackendUnavailableError, createLockClient } from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import { delay, freshMemory, scripted, uniqueKey, waitFor } from './fakes.js'

/** Counts the ticks of a 5 ms interval while `run` runs: a starved event loop shows as (almost) none. */
async function ticksDuring(run: () => Promise<unknown>): Promise<{ ticks: number; ms: number }> {
  let ticks = 0
  const interval = setInterval(() => ticks++, 5)
  const start = performance.now()
  try {
    await run()
  } finally {
    clearInterval(interval)
  }
  return { ticks, ms: performance.now() - start }
}

describe('a failing store', { timeout: 30_000 }, () => {
  it('never makes the acquire loop spin: retries wait on timers, and timers and aborts still run', async () => {
    // The attempt and the wake-up hint both fail at once, without any I/O (a circuit breaker that is open,
    // a folder that cannot be created): the loop must still yield to the event loop between attempts.
    const backend = scripted({
      tryAcquire: () => Promise.reject(new Error('circuit breaker is open')),
      waitForChange: () => Promise.reject(new Error('circuit breaker is open')),
    })
    const client = createLockClient(backend, { ttl: '1s' })
    const controller = new AbortController()
    const reason = new Error('the caller gave up')
    setTimeout(() => controller.abort(reason), 100)
    const { ticks, ms } = await ticksDuring(() =>
      assert.rejects(
        client.acquire(uniqueKey(), { signal: controller.signal, timeout: '10s' }),
        (e) => e === reason,
      ),
    )
    // Generous bounds: the abort at 100 ms is honoured within a second (it was ignored for 5 s before), the
    // 5 ms interval ticked (a loop spinning on microtasks starves every timer), and attempts were spaced by
    // a backoff, not made by the thousand. How many ticks is the machine's load, not the loop's doing: a
    // process the OS does not schedule for 100 ms ticks once.
    assert.ok(ms < 1000, `the abort at 100 ms took effect after ${Math.round(ms)} ms`)
    assert.ok(ticks >= 1, `no timer tick ran in ${Math.round(ms)} ms of outage`)
    const attempts = backend.of('tryAcquire').length
    assert.ok(attempts >= 1 && attempts <= 10, `${attempts} attempts in ${Math.round(ms)} ms`)
    await client.close()
  })

  it('a wake-up hint that settles at once on every call does not make the loop spin either', async () => {
    const inner = freshMemory()
    const key = uniqueKey()
    const holder = await createLockClient(inner).acquire(key, { ttl: '5s' })
    // Refused at once (no I/O) and a hint that is never armed for real: a watch that cannot be set up.
    const backend = scripted({ waitForChange: async () => {} }, inner)
    const client = createLockClient(backend)
    const { ticks, ms } = await ticksDuring(() =>
      assert.rejects(client.acquire(key, { timeout: '300ms' }), /held by another owner/),
    )
    assert.ok(ticks >= 10, `only ${ticks} timer ticks ran in ${Math.round(ms)} ms`)
    const attempts = backend.of('tryAcquire').length
    assert.ok(
      attempts <= 60,
      `${attempts} attempts in ${Math.round(ms)} ms: the instant hint was raced every time`,
    )
    await holder.release()
    await client.close()
  })

  it('a wake-up hint that is news the moment it is armed, time after time, still wakes the waiter', async () => {
    // Holders that release within a millisecond of each arming (a semaphore whose permits go round fast):
    // each hint is real news, and the waiter must act on it, not sleep out its poll (up to a second, since
    // the store keeps its place in line) as it did once two hints in a row had settled at once.
    const REFUSALS = 6
    let refusals = 0
    const backend = scripted({
      tryAcquire: (req, signal, inner) =>
        refusals++ < REFUSALS
          ? Promise.resolve({ granted: false, queued: true })
          : inner.tryAcquire(req, signal),
      waitForChange: async () => {},
    })
    const client = createLockClient(backend)
    const started = performance.now()
    const lock = await client.acquire(uniqueKey(), { timeout: '30s' })
    const ms = performance.now() - started
    // Four polls of the queued waiter take at least 4 × 500 ms: acting on the hints takes a few ms.
    assert.ok(ms < 1900, `${Math.round(ms)} ms for ${REFUSALS} refusals each followed by news`)
    assert.equal(backend.of('tryAcquire').length, REFUSALS + 1, 'one attempt per hint, no spin')
    await lock.release()
    await client.close()
  })

  it('an attempt that hangs is bounded by the timeout and reported as unavailable, not as contention', async () => {
    const backend = scripted({ tryAcquire: () => new Promise(() => {}) })
    const client = createLockClient(backend)
    const start = performance.now()
    await assert.rejects(client.acquire(uniqueKey(), { timeout: '2500ms' }), (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError, `got ${error}`)
      assert.match(error.message, /did not answer within \d+ ms/)
      return true
    })
    const ms = performance.now() - start
    assert.ok(ms >= 2400 && ms < 6000, `gave up after ${Math.round(ms)} ms for a 2.5 s timeout`)
    // The attempt's outcome is unknown: the acquire cleans up after it.
    await waitFor(() => backend.of('abandon').length === 1, 'the clean-up of the hung attempt')
    await client.close()
  })

  it('without a timeout, an unreachable store fails the acquire after max(ttl, 5 s)', async () => {
    const backend = scripted({ tryAcquire: () => Promise.reject(new Error('connection refused')) })
    const client = createLockClient(backend, { ttl: '1s' })
    const start = performance.now()
    await assert.rejects(client.acquire(uniqueKey()), BackendUnavailableError)
    const ms = performance.now() - start
    assert.ok(ms >= 4900 && ms < 9000, `gave up after ${Math.round(ms)} ms (the rule says 5 s)`)
    await client.close()
  })

  it('counts validity from the earliest attempt whose outcome was unknown', async () => {
    // Attempt 1 takes the lock on the store but its reply is lost; attempt 2 finds it "already ours". The
    // lease on the store began with attempt 1, so the validity must too, not with attempt 2.
    let first = true
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        const result = await inner.tryAcquire(req, signal)
        if (first) {
          first = false
          throw new Error('the reply was lost')
        }
        return result
      },
    })
    const client = createLockClient(backend, { ttl: '2s' })
    const lock = await client.acquire(uniqueKey(), { renew: false })
    const [attempt1, attempt2] = backend.of('tryAcquire')
    assert.ok(attempt1 && attempt2, 'two attempts')
    assert.ok(attempt2.startedAt - attempt1.startedAt >= 20, 'the retry waited for its backoff')
    assert.ok(
      lock.validUntil <= attempt1.startedAt + 2000,
      `validity ends ${Math.round(lock.validUntil - attempt1.startedAt)} ms after the first attempt began, ` +
        'beyond the 2 s lease that attempt set',
    )
    await lock.release()
    await client.close()
  })

  it('keeps the lease the store reports for an extend, when shorter than asked', async () => {
    const backend = scripted({
      extend: async (lease, ttlMs, signal, inner) => {
        const result = await inner.extend(lease, ttlMs, signal)
        return result.renewed ? { renewed: true, ttlMs: 2000 } : result
      },
    })
    const client = createLockClient(backend, { ttl: '2s', renew: false })
    const lock = await client.acquire(uniqueKey())
    const before = performance.now()
    await lock.extend('30s')
    assert.ok(
      lock.validUntil <= before + 2000,
      `validity ${Math.round(lock.validUntil - before)} ms exceeds the 2 s the store keeps`,
    )
    await lock.release()
    await client.close()
  })

  it('close() waits for the clean-up of an acquire it interrupted while the attempt was in flight', async () => {
    let release!: () => void
    const gate = new Promise<void>((resolve) => {
      release = resolve
    })
    const backend = scripted({
      // The store takes the lock, but only answers after the client was closed.
      tryAcquire: async (req, signal, inner) => {
        const result = await inner.tryAcquire(req, signal)
        await gate
        return result
      },
      abandon: async (req, signal) => backend.inner.abandon(req, signal),
    })
    const client = createLockClient(backend)
    const key = uniqueKey()
    const pending = client.acquire(key)
    pending.catch(() => {})
    await waitFor(() => backend.of('tryAcquire').length === 1, 'the attempt')
    const closing = awaitLater(client.close())
    await delay(20)
    release()
    await closing
    await assert.rejects(pending)
    assert.equal((await backend.inner.inspect(key, AbortSignal.timeout(1000)))?.held ?? false, false)
  })
})
