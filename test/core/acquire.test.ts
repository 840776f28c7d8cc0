import assert from 'node:assert/strict'
import { hostname } from 'node:os'
import { describe, it } from 'node:test'
import {
  BackendUnavailableError,
  CapabilityError,
  createLockClient,
  type Lock,
  type LockBackend,
  LockLostError,
  LockNotAcquiredError,
  LockReleasedError,
} from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import { delay, freshMemory, scripted, uniqueKey, waitFor } from './fakes.js'

describe('acquire', { timeout: 20_000 }, () => {
  it('returns a held lock with a key, a random owner, a fence and a validity in the future', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: '10s' })
    const key = uniqueKey()
    const lock = await client.acquire(key)
    assert.equal(lock.key, key)
    assert.match(lock.owner, /^[0-9a-f]{32}$/)
    assert.equal(typeof lock.fence, 'bigint')
    assert.ok(lock.fence > 0n)
    assert.ok(lock.validUntil > performance.now())
    assert.equal(lock.signal.aborted, false)
    assert.deepEqual(
      { ...(await client.inspect(key)), expiresInMs: undefined },
      {
        held: true,
        owner: lock.owner,
        holder: `${hostname()} (pid ${process.pid})`,
        fence: lock.fence,
        expiresInMs: undefined,
      },
    )
    await lock.release()
    assert.equal((await client.inspect(key)).held, false)
  })

  it('uses one owner id for every attempt of a call, and a new one per call', async () => {
    const backend = scripted()
    const key = uniqueKey()
    const client = createLockClient(backend)
    const holder = await client.acquire(key)
    const waiting = awaitLater(client.acquire(key, { timeout: '5s' }))
    await waitFor(() => backend.of('tryAcquire').length >= 3, 'a few attempts')
    await holder.release()
    const lock = await waiting
    const owners = backend.of('tryAcquire').map((c) => c.req?.owner)
    assert.equal(owners[0], holder.owner)
    assert.ok(owners.slice(1).every((o) => o === lock.owner))
    assert.notEqual(holder.owner, lock.owner)
    await lock.release()
  })

  it('tryAcquire resolves null while the key is held elsewhere, and a lock once it is free', async () => {
    const backend = freshMemory()
    const a = createLockClient(backend)
    const b = createLockClient(backend)
    const key = uniqueKey()
    const held = await a.acquire(key)
    assert.equal(await b.tryAcquire(key), null)
    assert.equal(await a.tryAcquire(key), null, 'not re-entrant within a client either')
    await held.release()
    const next = await b.tryAcquire(key)
    assert.ok(next)
    assert.ok(next.fence > held.fence)
    await next.release()
  })

  // A store whose grant of a free key takes more than one attempt (S3, GCS, DynamoDB: a new record waits
  // for the store's clock between two attempts) says so: the acquire keeps trying for the time it asks
  // and one attempt's more (limits.minAttemptMs), also past a shorter timeout.
  it("a grant under way (Busy.pending) is tried again past a tryAcquire's deadline, for the time it asks", async () => {
    let refusals = 3
    const backend = {
      ...scripted({
        tryAcquire: async (req, signal, inner) =>
          refusals-- > 0 ? { granted: false, pending: true, retryInMs: 100 } : inner.tryAcquire(req, signal),
      }),
      limits: { maxKeyBytes: 1024, maxTtlMs: 60_000, minAttemptMs: 3000 },
    }
    const client = createLockClient(backend)
    const lock = await client.tryAcquire(uniqueKey())
    assert.ok(lock, 'granted on the fourth attempt')
    assert.equal(backend.of('tryAcquire').length, 4)
    await lock.release()
    // One that never completes ends as not acquired, no sooner than minAttemptMs, saying why.
    refusals = Number.POSITIVE_INFINITY
    const started = performance.now()
    await assert.rejects(client.acquire(uniqueKey(), { timeout: 0 }), (error: unknown) => {
      assert.ok(error instanceof LockNotAcquiredError, String(error))
      assert.match(error.message, /was free, but the store did not settle its grant in time/)
      return true
    })
    assert.ok(performance.now() - started >= 3100, 'tried for the time asked and minAttemptMs')
    await client.close()
  })

  it('rejects with LockNotAcquiredError naming the key and the backend after the timeout', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const key = uniqueKey()
    const held = await client.acquire(key)
    const started = performance.now()
    await assert.rejects(client.acquire(key, { timeout: 200 }), (error: unknown) => {
      assert.ok(error instanceof LockNotAcquiredError)
      assert.equal(error.code, 'FENCELOCK_NOT_ACQUIRED')
      assert.equal(error.key, key)
      assert.equal(error.backend, backend.id)
      assert.ok(error.message.includes(key), 'the message names the key')
      return true
    })
    assert.ok(performance.now() - started >= 200, 'waited for the whole timeout')
    assert.equal((await client.inspect(key)).owner, held.owner, 'the holder was not disturbed')
    await held.release()
  })

  it('keeps unavailability apart from contention', async () => {
    const outage = new Error('connect ECONNREFUSED 127.0.0.1:6379')
    const backend = scripted({
      tryAcquire: async () => {
        throw outage
      },
    })
    const client = createLockClient(backend)
    const key = uniqueKey()
    const check = (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError)
      assert.ok(!(error instanceof LockNotAcquiredError))
      assert.equal(error.key, key)
      assert.equal(error.backend, backend.id)
      assert.equal(error.cause, outage)
      return true
    }
    await assert.rejects(client.tryAcquire(key), check, 'tryAcquire does not resolve null on an outage')
    await assert.rejects(client.acquire(key, { timeout: 150 }), check)
    assert.ok(backend.of('tryAcquire').length >= 2, 'the waiting acquire retried')
  })

  it('rides out a short outage while waiting', async () => {
    let attempts = 0
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        if (++attempts <= 2) throw new Error('ECONNRESET')
        return inner.tryAcquire(req, signal)
      },
    })
    const lock = await createLockClient(backend).acquire(uniqueKey(), { timeout: '5s' })
    assert.equal(backend.of('tryAcquire').length, 3)
    await lock.release()
  })

  it('gives up on a long outage even without a timeout', async () => {
    const backend = scripted({
      tryAcquire: async () => {
        throw new Error('ECONNREFUSED')
      },
    })
    const started = performance.now()
    await assert.rejects(
      createLockClient(backend, { ttl: 100 }).acquire(uniqueKey()),
      BackendUnavailableError,
    )
    assert.ok(performance.now() - started < 15_000)
  })

  it('fails at once on an outage that waiting cannot cure', async () => {
    const wrongPassword = new BackendUnavailableError('WRONGPASS invalid password', { retryable: false })
    const backend = scripted({
      tryAcquire: async () => {
        throw wrongPassword
      },
    })
    await assert.rejects(
      createLockClient(backend).acquire(uniqueKey(), { timeout: '5s' }),
      (e) => e === wrongPassword,
    )
    assert.equal(backend.of('tryAcquire').length, 1)
  })

  it('fails at once on a LockError that is not about availability', async () => {
    const refusal = new CapabilityError('this store cannot do that', { key: 'x' })
    const backend = scripted({
      tryAcquire: async () => {
        throw refusal
      },
    })
    await assert.rejects(
      createLockClient(backend).acquire(uniqueKey(), { timeout: '5s' }),
      (e) => e === refusal,
    )
    assert.equal(backend.of('tryAcquire').length, 1)
  })

  it("many concurrent acquires on one client do not trip Node's listener-leak warning", async () => {
    const warnings: Error[] = []
    const onWarning = (warning: Error) => {
      if (warning.name === 'MaxListenersExceededWarning') warnings.push(warning)
    }
    process.on('warning', onWarning)
    try {
      const client = createLockClient(freshMemory())
      const shutdown = new AbortController()
      const work = async (lock: Lock) => {
        await delay(1)
        return lock.fence
      }
      await Promise.all(Array.from({ length: 30 }, () => client.withLock('one', work, { timeout: '10s' })))
      await Promise.all(Array.from({ length: 30 }, (_, i) => client.withLock(`k${i}`, work)))
      await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          client.withLock(`s${i}`, work, { signal: shutdown.signal, timeout: '10s' }),
        ),
      )
      await delay(20)
      assert.deepEqual(
        warnings.map((w) => w.message),
        [],
      )
    } finally {
      process.off('warning', onWarning)
    }
  })
})

describe('withLock', { timeout: 20_000 }, () => {
  it("holds the lock while fn runs, releases it after, and resolves with fn's value", async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const other = createLockClient(backend)
    const key = uniqueKey()
    const result = await client.withLock(key, async (lock) => {
      assert.equal(lock.key, key)
      assert.equal(await other.tryAcquire(key), null)
      return { fence: lock.fence }
    })
    assert.equal(typeof result.fence, 'bigint')
    const after = await other.tryAcquire(key)
    assert.ok(after, 'released after fn')
    await after.release()
  })

  it("releases when fn throws, and rethrows fn's own error", async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    const key = uniqueKey()
    const boom = new Error('boom')
    await assert.rejects(
      client.withLock(key, async () => {
        throw boom
      }),
      (error) => error === boom,
    )
    await assert.rejects(
      client.withLock(key, () => {
        throw boom
      }),
      (error) => error === boom,
      'a synchronous throw too',
    )
    assert.equal(backend.of('release').length, 2)
    assert.equal((await client.inspect(key)).held, false)
  })

  it("prefers fn's error over a failed release", async () => {
    const backend = scripted({
      release: async () => {
        throw new Error('store down')
      },
    })
    const client = createLockClient(backend)
    const boom = new Error('boom')
    await assert.rejects(
      client.withLock(uniqueKey(), () => {
        throw boom
      }),
      (error) => error === boom,
    )
    await assert.rejects(
      client.withLock(uniqueKey(), () => 1),
      BackendUnavailableError,
    )
  })
})

describe('release and extend', { timeout: 20_000 }, () => {
  it('release is idempotent and calls the store once', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    const lock = await client.acquire(uniqueKey())
    await Promise.all([lock.release(), lock.release()])
    await lock.release()
    await lock[Symbol.asyncDispose]()
    assert.equal(backend.of('release').length, 1)
  })

  it('a normal release does not abort lock.signal', async () => {
    const client = createLockClient(freshMemory())
    const lock = await client.acquire(uniqueKey())
    await lock.release()
    await delay(20)
    assert.equal(lock.signal.aborted, false)
  })

  it('extend after release rejects with LockReleasedError and does not touch the store', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    const key = uniqueKey()
    const lock = await client.acquire(key, { renew: false })
    await lock.release()
    await assert.rejects(lock.extend(), (error: unknown) => {
      assert.ok(error instanceof LockReleasedError)
      assert.equal(error.code, 'FENCELOCK_RELEASED')
      assert.equal(error.key, key)
      assert.equal(error.backend, backend.id)
      return true
    })
    assert.equal(backend.of('extend').length, 0)
  })

  it('extend moves validity forward and accepts a new ttl', async () => {
    const client = createLockClient(freshMemory(), { ttl: '1s' })
    const lock = await client.acquire(uniqueKey(), { renew: false })
    const before = lock.validUntil
    const start = performance.now()
    await lock.extend('5s')
    assert.ok(lock.validUntil > before)
    assert.ok(lock.validUntil >= start + 5000 - (5000 * 0.01 + 2))
    await assert.rejects(lock.extend(-1), /`ttl`/)
    await lock.release()
  })

  it('extend of a lost lock rejects with the same LockLostError as lock.signal', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const key = uniqueKey()
    const lock = await client.acquire(key, { renew: false })
    backend.breakLock(key)
    await assert.rejects(lock.extend(), (error) => error instanceof LockLostError && error.key === key)
    assert.ok(lock.signal.aborted)
    await assert.rejects(lock.extend(), (error) => error === lock.signal.reason)
    await lock.release()
  })

  it('a release after the validity passed, before the expiry timer could run, tells the holder of the loss', async () => {
    const client = createLockClient(freshMemory(), { ttl: '100ms' })
    const lock = await client.acquire(uniqueKey(), { renew: false })
    // A busy event loop: the validity passes and the expiry timer cannot run before the release.
    while (performance.now() <= lock.validUntil + 1) {}
    await lock.release()
    assert.ok(lock.signal.aborted, 'the holder heard of the loss')
    assert.ok(lock.signal.reason instanceof LockLostError)
    assert.match(lock.signal.reason.message, /passed its validity/)
  })

  it('release after loss resolves and never frees the next holder', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const key = uniqueKey()
    const lost = await client.acquire(key, { renew: false })
    backend.breakLock(key)
    const next = await client.acquire(key, { timeout: '1s' })
    await lost.release()
    assert.equal((await client.inspect(key)).owner, next.owner)
    await next.release()
  })
})

describe('await using', { timeout: 20_000 }, () => {
  it('releases at the end of the scope, also when the scope throws', async () => {
    assert.equal(typeof Symbol.asyncDispose, 'symbol')
    const backend = scripted()
    const client = createLockClient(backend)
    const key = uniqueKey()
    let inside: Lock | undefined
    {
      await using lock = await client.acquire(key)
      inside = lock
      assert.equal((await client.inspect(key)).held, true)
    }
    assert.equal((await client.inspect(key)).held, false)
    assert.equal(inside.signal.aborted, false)

    const boom = new Error('boom')
    await assert.rejects(async () => {
      await using _lock = await client.acquire(key)
      throw boom
    }, boom)
    assert.equal((await client.inspect(key)).held, false)
    assert.equal(backend.of('release').length, 2)
  })

  it('closes a client at the end of the scope', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    {
      await using client = createLockClient(backend)
      await client.acquire(key)
    }
    const lock = await createLockClient(backend).tryAcquire(key)
    assert.ok(lock, 'the held lock was released by close')
    await lock.release()
  })
})

describe('waiting', { timeout: 20_000 }, () => {
  it('a waiter gets the lock soon after the holder releases, with a larger fence', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: '30s' })
    const key = uniqueKey()
    const holder = await client.acquire(key)
    let settled = false
    const waiting = client.acquire(key, { signal: AbortSignal.timeout(5000) })
    const done = () => {
      settled = true
    }
    waiting.then(done, done)
    await delay(100)
    assert.equal(settled, false, 'still waiting while the lock is held')
    await holder.release()
    const lock = await waiting
    assert.ok(lock.fence > holder.fence)
    await lock.release()
  })

  it('a waiter takes an abandoned lock once its lease ends', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    // Never released, never renewed: the holder "died" (or forgot it).
    const first = await createLockClient(backend).acquire(key, { ttl: 200, renew: false })
    const lock = await createLockClient(backend).acquire(key, { signal: AbortSignal.timeout(5000) })
    // Not while the first was valid: its validity ends a drift margin before the store's lease, and a
    // holder that reaches it takes its lease back at once.
    assert.ok(performance.now() >= first.validUntil, 'granted while the first lock was still valid')
    await lock.release()
  })

  it('fences strictly increase across successive holders', async () => {
    const backend = freshMemory()
    const clients = [createLockClient(backend), createLockClient(backend), createLockClient(backend)]
    const key = uniqueKey()
    const fences: bigint[] = []
    for (let i = 0; i < 9; i++) {
      const lock = await clients[i % 3]!.acquire(key, { timeout: '5s' })
      fences.push(lock.fence)
      await lock.release()
    }
    for (let i = 1; i < fences.length; i++) assert.ok(fences[i]! > fences[i - 1]!, `${fences}`)
  })

  it('50 concurrent contenders never overlap, and all finish', async () => {
    const backend = freshMemory()
    const clients = Array.from({ length: 5 }, () => createLockClient(backend))
    const key = uniqueKey()
    let inside = 0
    let maxInside = 0
    const fences: bigint[] = []
    const signal = AbortSignal.timeout(20_000)
    await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        clients[i % clients.length]!.withLock(
          key,
          async (lock) => {
            inside++
            maxInside = Math.max(maxInside, inside)
            fences.push(lock.fence)
            await delay(1)
            inside--
          },
          { signal },
        ),
      ),
    )
    assert.equal(maxInside, 1)
    assert.equal(fences.length, 50)
    for (let i = 1; i < fences.length; i++) assert.ok(fences[i]! > fences[i - 1]!, 'fences increase')
    await Promise.all(clients.map((c) => c.close()))
  })
})

describe('abandon', { timeout: 20_000 }, () => {
  /** A store holding `key` for someone else, and a client over it that records every call. */
  async function heldElsewhere() {
    const backend = scripted()
    const key = uniqueKey()
    const holder = await createLockClient(backend.inner).acquire(key)
    return { backend, key, holder, client: createLockClient(backend) }
  }
  const abandonedOnce = (backend: ReturnType<typeof scripted>) => {
    const abandons = backend.of('abandon')
    assert.equal(abandons.length, 1)
    const owners = new Set(backend.of('tryAcquire').map((c) => c.req?.owner))
    assert.deepEqual([...owners], [abandons[0]?.req?.owner], 'abandons the request it attempted')
  }

  it('tells the backend once when an acquire gives up: timeout, tryAcquire, abort, close', async () => {
    {
      const { backend, key, holder, client } = await heldElsewhere()
      await assert.rejects(client.acquire(key, { timeout: 100 }), LockNotAcquiredError)
      await waitFor(() => backend.of('abandon').length > 0, 'abandon after a timeout')
      abandonedOnce(backend)
      await holder.release()
    }
    {
      const { backend, key, holder, client } = await heldElsewhere()
      assert.equal(await client.tryAcquire(key), null)
      await waitFor(() => backend.of('abandon').length > 0, 'abandon after tryAcquire')
      abandonedOnce(backend)
      await holder.release()
    }
    {
      const { backend, key, holder, client } = await heldElsewhere()
      const controller = new AbortController()
      const waiting = awaitLater(client.acquire(key, { signal: controller.signal, timeout: '10s' }))
      await waitFor(() => backend.of('tryAcquire').length > 0, 'an attempt')
      controller.abort(new Error('stop'))
      await assert.rejects(waiting, /stop/)
      await waitFor(() => backend.of('abandon').length > 0, 'abandon after an abort')
      abandonedOnce(backend)
      await holder.release()
    }
    {
      const { backend, key, holder, client } = await heldElsewhere()
      const waiting = awaitLater(client.acquire(key, { timeout: '10s' }))
      await waitFor(() => backend.of('tryAcquire').length > 0, 'an attempt')
      await client.close()
      await assert.rejects(waiting, { code: 'FENCELOCK_CLIENT_CLOSED' })
      await waitFor(() => backend.of('abandon').length > 0, 'abandon after close')
      abandonedOnce(backend)
      await holder.release()
    }
  })

  it('is not called after a grant, nor when no attempt was made', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    const lock = await client.acquire(uniqueKey())
    await lock.release()
    await assert.rejects(
      client.acquire(uniqueKey(), { signal: AbortSignal.abort(new Error('early')) }),
      /early/,
    )
    await delay(20)
    assert.equal(backend.of('abandon').length, 0)
  })

  it("never replaces the acquire's own error, even when abandon fails", async () => {
    for (const how of ['rejects', 'throws synchronously'] as const) {
      const { backend, key, holder } = await heldElsewhere()
      const failing: LockBackend = {
        ...backend,
        abandon:
          how === 'rejects'
            ? async () => {
                throw new Error('abandon failed')
              }
            : () => {
                throw new Error('abandon failed')
              },
      }
      const reason = new Error('the real reason')
      await assert.rejects(createLockClient(failing).acquire(key, { timeout: 50 }), LockNotAcquiredError, how)
      await assert.rejects(
        createLockClient(failing).acquire(key, { signal: AbortSignal.timeout(50) }),
        (e) => e instanceof DOMException && e.name === 'TimeoutError',
        how,
      )
      const controller = new AbortController()
      const waiting = awaitLater(
        createLockClient(failing).acquire(key, { signal: controller.signal, timeout: '10s' }),
      )
      await delay(30)
      controller.abort(reason)
      await assert.rejects(waiting, (e) => e === reason, how)
      await holder.release()
    }
  })
})

describe('wake-up hint', { timeout: 20_000 }, () => {
  it('stays armed across the polls while it has not settled: one hint for the whole wait', async () => {
    // Armed again at every poll, a queue backend would set up its watch again (etcd: a watch and a read)
    // each time, for news the hint in place hears of just as well.
    const inner = freshMemory()
    const key = uniqueKey()
    const holder = await createLockClient(inner).acquire(key, { renew: false })
    let hints = 0
    const backend = scripted(
      {
        waitForChange: (req, signal) => {
          hints++
          return inner.waitForChange!(req, signal)
        },
      },
      inner,
    )
    const waiting = awaitLater(createLockClient(backend).acquire(key, { renew: false, timeout: '10s' }))
    // Polls 10, 20 and 40 ms apart (jittered): at least four attempts.
    await waitFor(() => backend.of('tryAcquire').length >= 5, 'the waiter polled a few times')
    assert.equal(hints, 1, 'the hint armed once stayed armed')
    await holder.release()
    const lock = await waiting
    await lock.release()
  })
})

describe('hand-over', { timeout: 20_000 }, () => {
  it('takes a grant handed over by the wake-up hint without arming another hint first', async () => {
    // A queue backend (etcd, ZooKeeper, fair Redis) hands the lock over from its hint; arming a new hint
    // before taking it costs a store request (a listing, a subscription) on every hand-over's critical path.
    const inner = freshMemory()
    const key = uniqueKey()
    const holder = await createLockClient(inner).acquire(key, { renew: false })
    let hints = 0
    let hintsAtHandOver: number | undefined
    const backend = scripted(
      {
        // As in a queue: the waiter's own attempts are refused; only the hand-over grants it.
        tryAcquire: async () => ({ granted: false }),
        waitForChange: async (req, signal) => {
          hints++
          while (!signal.aborted && (await inner.inspect(key, signal))?.held) await delay(5)
          if (signal.aborted) return undefined
          const result = await inner.tryAcquire(req, signal)
          if (!result.granted) return undefined
          hintsAtHandOver = hints
          return result
        },
      },
      inner,
    )
    const waiting = awaitLater(createLockClient(backend).acquire(key, { renew: false, timeout: '10s' }))
    await waitFor(() => hints > 0, 'the waiter armed its hint')
    await holder.release()
    const lock = await waiting
    assert.notEqual(hintsAtHandOver, undefined, 'the hint handed the lock over')
    assert.equal(hints, hintsAtHandOver, 'no hint armed between the hand-over and taking it')
    assert.ok(lock.fence > holder.fence)
    await lock.release()
  })
})

describe('local hints', { timeout: 20_000 }, () => {
  /**
   * A Redis-like backend: `waitForChange` only joins local listeners that a notification wakes. The first
   * three attempts are refused; the third is in flight when the holder's release is announced (after the
   * store judged it busy); the fourth is granted. Returns the order of attempts and hint arms, and how many hints heard that release.
   */
  async function run(localHint: boolean): Promise<{ events: string[]; heard: number }> {
    const listeners = new Set<() => void>()
    const notify = () => {
      for (const wake of [...listeners]) wake()
    }
    const events: string[] = []
    let heard = -1
    let attempts = 0
    const inner = freshMemory()
    const base = scripted(
      {
        tryAcquire: async (req, signal) => {
          attempts++
          events.push(`attempt ${attempts}`)
          if (attempts >= 4) return inner.tryAcquire(req, signal)
          if (attempts === 3) {
            await delay(5)
            heard = listeners.size
            notify()
          }
          // In line (as a Redlock waiter): the first poll comes after 0.5-1 s, so the hint wakes the waiter.
          return { granted: false, queued: true }
        },
        waitForChange: (_req, signal) =>
          new Promise<undefined>((resolve) => {
            events.push('hint armed')
            const wake = () => {
              listeners.delete(wake)
              signal.removeEventListener('abort', wake)
              resolve(undefined)
            }
            listeners.add(wake)
            signal.addEventListener('abort', wake, { once: true })
          }),
      },
      inner,
    )
    const backend = { ...base, capabilities: { ...base.capabilities, localHint } }
    const waiting = awaitLater(
      createLockClient(backend).acquire(uniqueKey(), { renew: false, timeout: '10s' }),
    )
    await waitFor(() => attempts === 2 && listeners.size === 1, 'the waiter waits on its hint')
    notify()
    const lock = await waiting
    await lock.release()
    return { events, heard }
  }

  it('re-arms a local hint right after the next attempt was sent, and it hears a change during that attempt', async () => {
    const { events, heard } = await run(true)
    // Arming overlaps the attempt's round trip instead of delaying its send.
    assert.deepEqual(events.slice(0, 5), ['attempt 1', 'hint armed', 'attempt 2', 'attempt 3', 'hint armed'])
    assert.equal(heard, 1, 'the release during attempt 3 reached a hint armed after attempt 3 was sent')
    assert.equal(
      events.filter((e) => e.startsWith('attempt')).at(-1),
      'attempt 4',
      'granted on the next attempt',
    )
  })

  it('arms any other hint before the attempt, as a watch on the store must be', async () => {
    const { events, heard } = await run(false)
    assert.deepEqual(events.slice(0, 5), ['attempt 1', 'hint armed', 'attempt 2', 'hint armed', 'attempt 3'])
    assert.equal(heard, 1)
  })
})
