/**
 * Timeouts are promises, also when the store never answers: how long one attempt may take (a `tryAcquire`,
 * a short timeout, the last attempt at the deadline), what a failed acquire waits for before it rejects,
 * and what `close()` waits for afterwards. The real stores are measured in test/backends/unreachable.test.ts;
 * here scripted backends make each case exact. Durations are asserted with room for a loaded machine; the
 * deterministic part (the bound an attempt was given, which error) carries the rule.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { BackendUnavailableError, createLockClient, LockNotAcquiredError } from '../../src/index.js'
import { scripted, uniqueKey, waitFor } from './fakes.js'

/** Room for a loaded machine on top of a documented bound (the bound itself is what docs/api.md says). */
const LOAD_MS = 2500

const never = () => new Promise<never>(() => {})

describe('timeouts against a store that does not answer', { timeout: 60_000 }, () => {
  it('tryAcquire gives its one attempt 1 s, then rejects as unavailable', async () => {
    const backend = scripted({ tryAcquire: never })
    const client = createLockClient(backend)
    const started = performance.now()
    await assert.rejects(client.tryAcquire(uniqueKey()), (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError, `got ${error}`)
      // 1 s from the acquire's start: the attempt's own bound is that less what came before it (a loaded
      // machine can take tens of ms to start it).
      const bound = Number(/did not answer within (\d+) ms/.exec(error.message)?.[1])
      assert.ok(bound > 500 && bound <= 1000, error.message)
      return true
    })
    const ms = performance.now() - started
    assert.ok(ms < 1500 + LOAD_MS, `tryAcquire took ${Math.round(ms)} ms`)
    await client.close()
  })

  it('a backend whose attempts take longer (limits.minAttemptMs) gives tryAcquire that long', async () => {
    const backend = {
      ...scripted({ tryAcquire: never }),
      limits: { maxKeyBytes: 1024, maxTtlMs: 60_000, minAttemptMs: 2000 },
    }
    const client = createLockClient(backend)
    await assert.rejects(client.tryAcquire(uniqueKey()), /did not answer within (199\d|2000) ms/)
    await client.close()
  })

  it('acquire({ timeout: "1s" }) bounds its attempt by the timeout', async () => {
    const backend = scripted({ tryAcquire: never })
    const client = createLockClient(backend)
    const started = performance.now()
    await assert.rejects(
      client.acquire(uniqueKey(), { timeout: '1s' }),
      /did not answer within (99\d|1000) ms/,
    )
    const ms = performance.now() - started
    assert.ok(ms < 1500 + LOAD_MS, `acquire({ timeout: '1s' }) took ${Math.round(ms)} ms`)
    await client.close()
  })

  it('gives the last attempt at the deadline 300 ms; one cut short after refusals is contention, cleaned up', async () => {
    const key = uniqueKey()
    let deadline = Number.POSITIVE_INFINITY
    // The key is held elsewhere; from the deadline on, the store stops answering.
    const backend = scripted({
      tryAcquire: (req, signal, inner) =>
        performance.now() >= deadline ? never() : inner.tryAcquire(req, signal),
    })
    const holder = await backend.inner.tryAcquire(
      { key, owner: 'other', ttlMs: 60_000 },
      AbortSignal.timeout(1000),
    )
    assert.ok(holder.granted)
    const client = createLockClient(backend)
    const started = performance.now()
    deadline = started + 1500
    const acquiring = client.acquire(key, { timeout: '1500ms' })
    await assert.rejects(acquiring, (error: unknown) => {
      assert.ok(error instanceof LockNotAcquiredError, `got ${error}`)
      return true
    })
    const ms = performance.now() - started
    assert.ok(ms < 2000 + LOAD_MS, `acquire({ timeout: '1.5s' }) took ${Math.round(ms)} ms`)
    const last = backend.of('tryAcquire').at(-1)!
    assert.ok(last.startedAt >= deadline, 'the last attempt started at the deadline')
    // Its outcome is unknown: the acquire cleans up after it.
    await waitFor(() => backend.of('abandon').length === 1, 'the clean-up of the attempt cut short')
    await client.close()
  })

  it('a store that stopped answering: the rejection and close() do not wait for the clean-up', async () => {
    const backend = scripted({
      tryAcquire: async () => {
        throw new BackendUnavailableError('connection refused at 127.0.0.1:1')
      },
      abandon: never,
    })
    const client = createLockClient(backend)
    let rejectedAt = 0
    await assert.rejects(
      client.acquire(uniqueKey(), { timeout: '1s' }).finally(() => {
        rejectedAt = performance.now()
      }),
      BackendUnavailableError,
    )
    await waitFor(() => backend.of('abandon').length === 1, 'the clean-up')
    const abandonAt = backend.of('abandon')[0]!.startedAt
    // No timer lies between the clean-up's start and the rejection (it used to wait 1 s for it).
    assert.ok(
      rejectedAt - abandonAt < 900,
      `rejected ${Math.round(rejectedAt - abandonAt)} ms after the clean-up began`,
    )
    const closing = performance.now()
    await client.close()
    const ms = performance.now() - closing
    // close() waits up to 3 s for clean-ups that can land; this one cannot.
    assert.ok(ms < 2000, `close() took ${Math.round(ms)} ms`)
  })

  it('a process stalled past its give-up time starts no attempt: it fails with the outage it saw', async () => {
    // The first attempt fails as an outage; while the acquire backs off, the event loop stalls past the
    // give-up time (5 s), as on a machine that deschedules the process. A next attempt would get a bound
    // below zero (it used to report "did not answer within -300 ms").
    const backend = scripted({
      tryAcquire: async () => {
        if (backend.of('tryAcquire').length > 1) return never()
        setTimeout(() => {
          const until = performance.now() + 5300
          while (performance.now() < until) {}
        }, 10)
        throw new BackendUnavailableError('connection refused at 127.0.0.1:1')
      },
    })
    const client = createLockClient(backend, { ttl: 1000 })
    await assert.rejects(client.acquire(uniqueKey()), (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError, `got ${error}`)
      assert.match(error.message, /connection refused at 127\.0\.0\.1:1/)
      assert.doesNotMatch(error.message, /within -?\d+ ms/)
      return true
    })
    assert.equal(backend.of('tryAcquire').length, 1, 'no attempt after the give-up time')
    await client.close()
  })

  it('a store that answers: the rejection waits for the clean-up only until 0.5 s past the deadline', async () => {
    const key = uniqueKey()
    const backend = scripted({ abandon: never })
    const holder = await backend.inner.tryAcquire(
      { key, owner: 'other', ttlMs: 60_000 },
      AbortSignal.timeout(1000),
    )
    assert.ok(holder.granted)
    const client = createLockClient(backend)
    let rejectedAt = 0
    await assert.rejects(
      client.acquire(key, { timeout: '1s' }).finally(() => {
        rejectedAt = performance.now()
      }),
      LockNotAcquiredError,
    )
    const abandonAt = backend.of('abandon')[0]!.startedAt
    // It begins at the deadline, and the wait ends 0.5 s past it (it used to be a whole second).
    assert.ok(
      rejectedAt - abandonAt < 950,
      `rejected ${Math.round(rejectedAt - abandonAt)} ms after the clean-up began`,
    )
    await client.close()
  })

  it('inspect() rejects as unavailable after 5 s without an answer', async () => {
    const backend = { ...scripted(), inspect: never }
    const client = createLockClient(backend)
    const started = performance.now()
    await assert.rejects(client.inspect(uniqueKey()), (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError, `got ${error}`)
      assert.match(error.message, /did not answer within 5000 ms/)
      return true
    })
    const ms = performance.now() - started
    assert.ok(ms < 5000 + LOAD_MS, `inspect took ${Math.round(ms)} ms`)
    await client.close()
  })

  it('each page of list() and a break() are bounded too; a page that never comes ends the listing', async () => {
    let stopped: AbortSignal | undefined
    const backend = {
      ...scripted(),
      // One lock, then a page that never comes.
      async *list(_prefix: string, signal: AbortSignal) {
        stopped = signal
        yield { key: 'a', held: true, owner: 'o', fence: 1n }
        await never()
      },
      breakLock: never,
    }
    const client = createLockClient(backend)
    const seen: string[] = []
    let started = performance.now()
    await assert.rejects(
      (async () => {
        for await (const lock of client.list()) seen.push(lock.key)
      })(),
      (error: unknown) => {
        assert.ok(error instanceof BackendUnavailableError, `got ${error}`)
        assert.match(error.message, /Could not list the locks under .* did not answer within 5000 ms/)
        return true
      },
    )
    assert.deepEqual(seen, ['a'])
    assert.ok(performance.now() - started < 5000 + LOAD_MS)
    assert.equal(stopped?.aborted, true, "the backend's listing is told to stop")
    started = performance.now()
    await assert.rejects(client.break(uniqueKey()), /did not answer within 15000 ms/)
    assert.ok(performance.now() - started < 15_000 + LOAD_MS)
    await client.close()
  })

  it("a caller's abort of inspect, list or break rejects with its reason, unchanged", async () => {
    const backend = {
      ...scripted(),
      inspect: never,
      breakLock: never,
      // A listing whose first page never comes.
      list: () => ({ [Symbol.asyncIterator]: () => ({ next: never }) }),
    }
    const client = createLockClient(backend)
    const reason = new Error('operator gave up')
    for (const call of [
      (signal: AbortSignal) => client.inspect(uniqueKey(), { signal }),
      (signal: AbortSignal) => client.break(uniqueKey(), { signal }),
      async (signal: AbortSignal) => {
        for await (const _ of client.list('', { signal })) break
      },
    ]) {
      const controller = new AbortController()
      const pending = call(controller.signal)
      pending.catch(() => {})
      controller.abort(reason)
      await assert.rejects(pending, (error: unknown) => error === reason)
    }
    await client.close()
  })
})
