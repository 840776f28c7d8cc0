import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import type { MemoryBackend } from '../../src/backends/memory/index.js'
import { type Scheduled, Scheduler } from '../../src/core/scheduler.js'
import {
  createLockClient,
  type ExtendOutcome,
  type HeldLease,
  type Lock,
  type LockBackend,
  LockLostError,
} from '../../src/index.js'
import { aborted, delay, freshMemory, settle, trackUnhandledRejections, uniqueKey, waitFor } from './fakes.js'

const unhandled = trackUnhandledRejections()
after(async () => {
  await settle()
  assert.deepEqual(unhandled, [], 'no unhandled rejections')
})

/** One `extendMany` call: when it started and ended, and the keys it carried. */
interface Batch {
  readonly startedAt: number
  endedAt?: number
  readonly keys: string[]
}

interface BatchingBackend extends LockBackend {
  readonly batches: Batch[]
  /** When each key's release was sent. */
  readonly releases: Map<string, number>
  /** Single extends. */
  extends: number
}

/**
 * A memory store with `extendMany`: each batch extends its leases one by one on the store, after
 * `answer` (which may also decide a lease's outcome itself).
 */
function batching(
  answer: (lease: HeldLease, signal: AbortSignal) => Promise<ExtendOutcome | undefined> = async () =>
    undefined,
  inner: MemoryBackend = freshMemory(),
): BatchingBackend {
  const backend: BatchingBackend = {
    id: `batching+${inner.id}`,
    capabilities: inner.capabilities,
    batches: [],
    releases: new Map(),
    extends: 0,
    tryAcquire: (req, signal) => inner.tryAcquire(req, signal),
    extend: (lease, ttlMs, signal) => {
      backend.extends++
      return inner.extend(lease, ttlMs, signal)
    },
    async extendMany(leases, ttlMs, signal) {
      const batch: Batch = { startedAt: performance.now(), keys: leases.map((l) => l.key) }
      backend.batches.push(batch)
      try {
        return await Promise.all(
          leases.map(async (lease, i) => {
            try {
              return (await answer(lease, signal)) ?? (await inner.extend(lease, ttlMs[i]!, signal))
            } catch (error) {
              return { error }
            }
          }),
        )
      } finally {
        batch.endedAt = performance.now()
      }
    },
    release: (lease, signal) => {
      backend.releases.set(lease.key, performance.now())
      return inner.release(lease, signal)
    },
    inspect: (key, signal) => inner.inspect(key, signal),
    abandon: async () => {},
    close: () => inner.close(),
  }
  return backend
}

/** Counts the timers this process creates while `run` runs. */
async function countTimers(run: () => Promise<void>): Promise<number> {
  const original = globalThis.setTimeout
  let created = 0
  globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
    created++
    return original(...args)
  }) as typeof setTimeout
  try {
    await run()
  } finally {
    globalThis.setTimeout = original
  }
  return created
}

const acquireMany = (client: ReturnType<typeof createLockClient>, count: number, prefix = uniqueKey()) =>
  Promise.all(Array.from({ length: count }, (_, i) => client.acquire(`${prefix}:${i}`)))

describe('scheduler', { timeout: 60_000 }, () => {
  it('runs entries in due order on one timer, and skips cancelled ones', async () => {
    interface Entry extends Scheduled {
      readonly id: number
    }
    const ran: number[] = []
    const scheduler = new Scheduler<Entry>((entries) => {
      for (const e of entries) ran.push(e.id)
    })
    const entries: Entry[] = Array.from({ length: 2000 }, (_, id) => ({
      id,
      dueAt: Number.POSITIVE_INFINITY,
      heapIndex: -1,
    }))
    const start = performance.now()
    const timers = await countTimers(async () => {
      for (const [i, entry] of entries.entries()) scheduler.schedule(entry, start + 50 + i / 10)
      for (let i = 0; i < entries.length; i += 2) scheduler.cancel(entries[i]!)
      await waitFor(() => ran.length === entries.length / 2, 'every entry run', { withinMs: 10_000 })
    })
    assert.deepEqual(
      ran,
      entries.filter((e) => e.id % 2 === 1).map((e) => e.id),
    )
    assert.equal(scheduler.size, 0)
    // One timer per run (and the test's own polling), never one per entry.
    assert.ok(timers < entries.length / 4, `${timers} timers`)
  })

  it('sends a round of thousands of renewals a chunk per turn of the event loop', async () => {
    const backend = batching()
    // Which turn of the event loop each batch went out in.
    let turns = 0
    let ticking = true
    const tick = () => {
      turns++
      if (ticking) setImmediate(tick)
    }
    tick()
    const turnOf: number[] = []
    const extendMany = backend.extendMany!.bind(backend)
    backend.extendMany = (leases, ttlMs, signal) => {
      turnOf.push(turns)
      return extendMany(leases, ttlMs, signal)
    }
    // A lease long enough that taking 2500 locks on a loaded machine (seconds) cannot use it up.
    const ttl = 20_000
    const client = createLockClient(backend, { ttl })
    try {
      const started = performance.now()
      const locks = await acquireMany(client, 2500)
      // A stalled event loop: every lock's renewal (due ttl/3 after its grant) comes due in one round.
      const stalledUntil = Math.max(performance.now(), started + ttl / 3) + 500
      while (performance.now() < stalledUntil) {}
      // The first renewal of every lock: the batches until 2500 keys went out.
      const firstRound = () => {
        let keys = 0
        for (const [i, batch] of backend.batches.entries()) {
          keys += batch.keys.length
          if (keys >= locks.length) return backend.batches.slice(0, i + 1)
        }
        return undefined
      }
      await waitFor(() => firstRound() !== undefined, 'every lock renewed once', { withinMs: 20_000 })
      const round = firstRound()!
      const sizes = round.map((b) => b.keys.length)
      assert.ok(
        sizes.every((n) => n <= 1000),
        `batch sizes ${sizes}`,
      )
      const turnsOfRound = turnOf.slice(0, round.length)
      assert.equal(new Set(turnsOfRound).size, round.length, `turns ${turnsOfRound}`)
      await waitFor(() => round.every((b) => b.endedAt !== undefined), 'the round answered', {
        withinMs: 20_000,
      })
      for (const lock of locks) assert.equal(lock.signal.aborted, false, lock.key)
      await Promise.all(locks.map((l) => l.release()))
    } finally {
      ticking = false
      await client.close()
    }
  })

  it('keeps its timer when the last entry leaves, for the next one due later', async () => {
    const ran: Scheduled[] = []
    const scheduler = new Scheduler<Scheduled>((entries) => {
      ran.push(...entries)
    })
    const start = performance.now()
    const entry = (): Scheduled => ({ dueAt: Number.POSITIVE_INFINITY, heapIndex: -1 })
    // A lock acquired and released in a loop: each grant's expiry is due a little later than the last.
    const timers = await countTimers(async () => {
      for (let i = 0; i < 100; i++) {
        const e = entry()
        scheduler.schedule(e, start + 60_000 + i)
        scheduler.cancel(e)
      }
    })
    assert.equal(timers, 1)
    // Still on time for an entry due sooner than the timer kept, and for the one due after it.
    const soon = entry()
    const later = entry()
    scheduler.schedule(later, performance.now() + 300)
    scheduler.schedule(soon, performance.now() + 100)
    await waitFor(() => ran.length === 2, 'both run', { withinMs: 10_000 })
    assert.deepEqual(ran, [soon, later])
    assert.equal(scheduler.size, 0)
  })

  it('runs an entry due at NaN at once, and holds up no other', async () => {
    // A bound computed from a NaN duration: every comparison with NaN is false, so in the heap it would
    // rise to the root and never come due, and no entry behind it would either.
    const ran: Scheduled[] = []
    const scheduler = new Scheduler<Scheduled>((entries) => {
      ran.push(...entries)
    })
    const entry = (): Scheduled => ({ dueAt: Number.POSITIVE_INFINITY, heapIndex: -1 })
    const broken = entry()
    const later = entry()
    scheduler.schedule(broken, Number.NaN)
    scheduler.schedule(later, performance.now() + 50)
    await waitFor(() => ran.length === 2, 'both run', { withinMs: 5000 })
    assert.deepEqual(ran, [broken, later])
    assert.equal(scheduler.size, 0)
  })

  it('renews many locks on one timer, gathered into batches', async () => {
    const backend = batching()
    const client = createLockClient(backend, { ttl: 3000 })
    const locks = await acquireMany(client, 300)
    const firstValidity = locks.map((l) => l.validUntil)
    // Long enough for every lock to be renewed two or three times (every ttl/3), with room for a loaded
    // machine: the ttl leaves seconds of slack, so a stalled event loop delays renewals without a loss.
    const timers = await countTimers(() => delay(3500))
    for (const [i, lock] of locks.entries()) {
      assert.equal(lock.signal.aborted, false)
      assert.ok(lock.validUntil > firstValidity[i]!, 'renewed')
    }
    const renewed = backend.batches.reduce((sum, b) => sum + b.keys.length, 0)
    // One extend each before; a renewal may still go out alone when a stall leaves it due on its own.
    assert.ok(
      backend.extends <= renewed / 10,
      `${backend.extends} single extends beside ${renewed} in batches`,
    )
    assert.ok(renewed >= locks.length, `${renewed} renewals`)
    assert.ok(backend.batches.length < renewed / 10, `${backend.batches.length} batches for ${renewed}`)
    // Two timers per lock per renewal before (plus a deadline each): here a few per batch.
    assert.ok(timers < 300, `${timers} timers for ${renewed} renewals`)
    await client.close()
  })

  it('renews a third of the ttl into the validity (less the gathering grid), well before validUntil', async () => {
    const backend = batching()
    const ttl = 3000
    const client = createLockClient(backend, { ttl })
    const acquiredAt = performance.now()
    const locks = await acquireMany(client, 20)
    const validUntil = Math.min(...locks.map((l) => l.validUntil))
    await waitFor(() => backend.batches.length > 0, 'a batch', { withinMs: 10_000 })
    const first = backend.batches[0]!.startedAt
    // A third of the ttl into the validity (which starts at the acquire and ends a drift margin early,
    // 1 % + 2 ms by default), moved onto the ttl/30 grid.
    const earliest = acquiredAt + ttl / 3 - (ttl * 0.01 + 2) - ttl / 30 - 1
    assert.ok(first >= earliest, `first renewal ${first - acquiredAt} ms after acquire`)
    assert.ok(first < validUntil)
    await client.close()
  })

  it('declares each lock lost at its validUntil when its renewals hang', async () => {
    // Renewals that never answer (until the core gives up at the validity).
    const backend = batching(
      (_lease, signal) =>
        new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
    )
    const client = createLockClient(backend, { ttl: 600 })
    const locks = await acquireMany(client, 50)
    const ends = await Promise.all(
      locks.map(async (lock) => {
        const { reason, at } = await aborted(lock.signal, 10_000)
        return { lock, reason, at }
      }),
    )
    for (const { lock, reason, at } of ends) {
      assert.ok(reason instanceof LockLostError)
      assert.ok(at >= lock.validUntil, 'not declared lost before its validity ended')
    }
    assert.ok(backend.batches.length > 0)
    await client.close()
  })

  it('a blocked event loop still reports the loss of every lock the moment it is read', async () => {
    const client = createLockClient(batching(), { ttl: 200, renew: false })
    const locks = await acquireMany(client, 200)
    const latest = Math.max(...locks.map((l) => l.validUntil))
    // Busy: no timer can run until this turn ends.
    while (performance.now() < latest + 5) {}
    for (const lock of locks) {
      assert.equal(lock.remainingMs, 0)
      assert.equal(lock.signal.aborted, true, 'aborted when read, before any timer ran')
    }
    await client.close()
  })

  it('sends no renewal of a lock after its release began, and releases after the batch in flight', async () => {
    let slow = true
    const backend = batching(async () => {
      if (slow) await delay(300)
      return undefined
    })
    const client = createLockClient(backend, { ttl: 3000 })
    const locks = await acquireMany(client, 20)
    await waitFor(() => backend.batches.some((b) => b.endedAt === undefined), 'a batch in flight', {
      withinMs: 10_000,
    })
    const inFlight = backend.batches.find((b) => b.endedAt === undefined)!
    const releasedAt = performance.now()
    const releases = locks.map((l) => l.release())
    slow = false
    await Promise.all(releases)
    await delay(1000)
    for (const lock of locks) {
      const sent = backend.releases.get(lock.key)
      assert.ok(sent !== undefined)
      if (inFlight.keys.includes(lock.key)) assert.ok(sent >= inFlight.endedAt!, 'the release waited')
      for (const batch of backend.batches) {
        if (batch.startedAt >= releasedAt)
          assert.ok(!batch.keys.includes(lock.key), 'no renewal after release')
      }
    }
    await client.close()
  })

  it('gives each lock of a batch its own outcome', async () => {
    const inner = freshMemory()
    let lostKey = ''
    let unknownKey = ''
    let unknownCount = 0
    const backend = batching(async (lease) => {
      if (lease.key === lostKey) return { renewed: false }
      if (lease.key === unknownKey && unknownCount++ === 0) return { error: new Error('no reply') }
      return undefined
    }, inner)
    const client = createLockClient(backend, { ttl: 3000 })
    const locks: Lock[] = await acquireMany(client, 10)
    lostKey = locks[3]!.key
    unknownKey = locks[5]!.key
    const { reason } = await aborted(locks[3]!.signal, 10_000)
    assert.ok(reason instanceof LockLostError)
    // The unknown one is retried soon (alone: one extend; with others: in a batch), and stays held.
    await waitFor(() => unknownCount >= 2 || backend.extends > 0, 'a retry', { withinMs: 10_000 })
    await delay(700)
    for (const [i, lock] of locks.entries())
      if (i !== 3) assert.equal(lock.signal.aborted, false, `lock ${i}`)
    await client.close()
  })
})
