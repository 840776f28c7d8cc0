/**
 * The cas-lease engine (src/engines/cas/engine.ts) against an in-memory conditional-write store
 * (fake-cas-store.ts): no cloud, no network. Each "process" is its own backend over the shared store, so
 * each has its own observations, as separate machines would. Timing checks are lower bounds only (a
 * takeover never earlier than a lease plus the margin after the version it replaces was seen), the safety
 * side; liveness waits are generous.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { AcquireRequest, AttemptResult } from '../../../src/core/backend.js'
import { casLeaseBackend } from '../../../src/engines/cas/backend.js'
import type { CasLeaseOptions } from '../../../src/engines/cas/engine.js'
import { encodeRecord } from '../../../src/engines/cas/record.js'
import { BackendUnavailableError, createLockClient, type Lock, LockError } from '../../../src/index.js'
import { assertSuccessiveHolds, type Hold } from '../../support/holds.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'
import { FakeCasStore } from './fake-store.js'

const MARGIN = 50
const signal = () => AbortSignal.timeout(10_000)

/**
 * One process: its own engine (its own observations) over its own connection to the shared store;
 * `crash()` cuts it off (no renewal, no release, not even the release at local expiry gets through).
 */
function processOn(store: FakeCasStore, options: CasLeaseOptions = {}) {
  const view = store.view()
  const backend = casLeaseBackend(view, { marginMs: MARGIN, pollMaxMs: 100, ...options })
  return { backend, client: createLockClient(backend, { ttl: 2000 }), crash: () => view.crash() }
}

/** A record a holder that is gone left behind: held, with nothing that says since when. */
function deadHolder(store: FakeCasStore, key: string, fence: bigint, leaseMs: number): string {
  const record = { owner: 'd'.repeat(32), fence, leaseMs, state: 'held' as const, nonce: 'n0' }
  return store.put(key, encodeRecord({ ...record, holder: 'crashed (pid 1)' }))
}

/** A record a holder released: free for the next writer. */
function released(store: FakeCasStore, key: string, fence: bigint): string {
  return store.put(
    key,
    encodeRecord({ owner: 'd'.repeat(32), fence, leaseMs: 5000, state: 'released', nonce: 'n0' }),
  )
}

const logOf = (store: FakeCasStore, op: string) => store.log.filter((l) => l.op === op && l.applied)

describe('cas-lease: grants, fences and request counts', () => {
  it('grants, renews and releases with 1 read + 1 write, 1 write, 1 write; the fence moves only with grants', async () => {
    const store = new FakeCasStore()
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    assert.equal(lock.fence, 1n)
    assert.deepEqual([store.count('read'), store.count('write')], [1, 1])
    const before = store.records.get('k')!.version
    await lock.extend()
    assert.notEqual(store.records.get('k')!.version, before, 'a renewal writes a new version')
    assert.equal(store.json('k')!.fence, '1')
    assert.equal(store.count('write'), 2)
    await lock.release()
    assert.equal(store.count('write'), 3)
    assert.deepEqual([store.json('k')!.state, store.json('k')!.fence], ['released', '1'])
    const next = await client.acquire('k', { renew: false })
    assert.equal(next.fence, 2n)
    await next.release()
    await client.close()
  })

  it('keeps the holder for inspect and counts down the lease it has observed', async () => {
    const store = new FakeCasStore()
    const { client } = processOn(store)
    const lock = await client.acquire('k', { holder: 'build-7 (pid 4121)', ttl: 5000, renew: false })
    const info = await client.inspect('k')
    assert.equal(info.held, true)
    assert.equal(info.owner, lock.owner)
    assert.equal(info.holder, 'build-7 (pid 4121)')
    assert.equal(info.fence, 1n)
    assert.ok(info.expiresInMs !== undefined && info.expiresInMs <= 5000 && info.expiresInMs > 0)
    await lock.release()
    assert.deepEqual(await client.inspect('k'), { held: false, fence: 1n })
    await client.close()
  })

  it('refuses a negative margin and a poll interval that is not positive', () => {
    const store = new FakeCasStore()
    assert.throws(() => casLeaseBackend(store, { marginMs: -1 }), /marginMs/)
    assert.throws(() => casLeaseBackend(store, { pollMaxMs: 0 }), /pollMaxMs/)
    assert.equal(casLeaseBackend(store, { id: 'named' }).id, 'named')
    assert.deepEqual(casLeaseBackend(store).capabilities, { expiry: 'observed', notify: false, fifo: false })
  })

  it('never overwrites a record it cannot read (its fence is unknown), and says so in inspect', async () => {
    const store = new FakeCasStore()
    store.put('k', 'not a fencelock record')
    const { client } = processOn(store)
    assert.equal(await client.tryAcquire('k'), null)
    assert.equal(await client.tryAcquire('k', { timeout: 300 }), null)
    assert.equal(store.count('write'), 0)
    const info = await client.inspect('k')
    assert.equal(info.held, true)
    assert.match(info.note ?? '', /not a fencelock record/)
    await client.close()
  })
})

describe('cas-lease: exclusivity and observed expiry', () => {
  it('excludes under concurrent contenders in several processes, fences increasing', async () => {
    const store = new FakeCasStore()
    store.delayMs = 2
    const processes = Array.from({ length: 4 }, () => processOn(store))
    const holds: Hold[] = []
    await Promise.all(
      processes.map(async ({ client }) => {
        for (let i = 0; i < 4; i++) {
          const lock = await client.acquire('k', { timeout: 20_000 })
          const start = performance.now()
          await sleep(5)
          holds.push({ fence: lock.fence, start, end: performance.now() })
          await lock.release()
        }
      }),
    )
    assert.equal(holds.length, 16)
    assertSuccessiveHolds(holds)
    for (const { client } of processes) await client.close()
  })

  it('excludes under lost replies, refusals after applying, 503s and crashed holders', async () => {
    const store = new FakeCasStore()
    store.delayMs = 1
    const faults = ['lose-reply', 'apply-then-refuse', 'throw-before', 503, 'refuse'] as const
    const processes = Array.from({ length: 4 }, () => processOn(store, { marginMs: 20 }))
    const holds: Hold[] = []
    await Promise.all(
      processes.map(async ({ client }, p) => {
        for (let i = 0; i < 6; i++) {
          store.next(i % 2 ? 'write' : 'read', faults[(p + i) % faults.length]!)
          // Once, a process of its own that crashes while it holds: the next waits out its lease.
          const crashing = i === 3 && p === 0 ? processOn(store, { marginMs: 20 }) : undefined
          const lock = await (crashing?.client ?? client).acquire('k', { timeout: 20_000, ttl: 300 })
          const start = performance.now()
          await sleep(3)
          crashing?.crash()
          // A crashed (or paused) holder may act until its validity ends.
          const end = crashing ? lock.validUntil : Math.min(performance.now(), lock.validUntil)
          holds.push({ fence: lock.fence, start, end })
          if (!crashing) await lock.release().catch(() => {})
        }
      }),
    )
    assert.equal(holds.length, 24)
    assertSuccessiveHolds(holds)
    for (const { client } of processes) await client.close()
  })

  it('takes over a dead holder only after a whole lease plus the margin of seeing it unchanged', async () => {
    const store = new FakeCasStore()
    // Written "long ago" as far as any wall clock goes: the record carries no time, so only the
    // waiter's own observation counts.
    deadHolder(store, 'k', 7n, 300)
    const { client } = processOn(store)
    const lock = await client.acquire('k', { timeout: 5000, renew: false })
    assert.equal(lock.fence, 8n)
    const firstRead = logOf(store, 'read')[0]!
    const takeover = logOf(store, 'replace').at(-1)!
    assert.ok(
      takeover.at >= firstRead.applied! + 300 + MARGIN,
      `taken over ${Math.round(takeover.at - firstRead.applied!)} ms after the first read served it`,
    )
    await lock.release()
    await client.close()
  })

  it('a takeover write that failed keeps the observation: the retry does not wait another lease', async () => {
    const store = new FakeCasStore()
    deadHolder(store, 'k', 3n, 1500)
    store.next('replace', 'throw-before')
    const { client } = processOn(store)
    const lock = await client.acquire('k', { timeout: 10_000, renew: false })
    assert.equal(lock.fence, 4n)
    const firstRead = logOf(store, 'read')[0]!
    const takeover = logOf(store, 'replace').at(-1)!
    assert.equal(store.count('replace'), 2)
    // Restarting the watch would take a second lease (>= 3.1 s); keeping it, one lease and a backoff.
    assert.ok(
      takeover.at - firstRead.applied! < 2800,
      `took ${Math.round(takeover.at - firstRead.applied!)} ms`,
    )
    await lock.release()
    await client.close()
  })

  it('a renewal restarts the observation: no takeover while the holder renews, then only a lease after its last', async () => {
    const store = new FakeCasStore()
    const holder = processOn(store)
    const waiter = processOn(store)
    // Renewals every 100 ms against a lease of 1 s: only a renewal late by most of a lease would let
    // the waiter in (rightly), which a loaded machine does not reach.
    const held = await holder.client.acquire('k', { ttl: 1000, renew: false })
    const acquired = awaitLater(waiter.client.acquire('k', { timeout: 10_000, ttl: 1000, renew: false }))
    const renewals = 6
    let lastValid = held.validUntil
    for (let i = 0; i < renewals; i++) {
      await sleep(100)
      await held.extend()
      lastValid = held.validUntil
    }
    holder.crash()
    const taken = await acquired
    const grantedAt = performance.now()
    assert.equal(taken.fence, held.fence + 1n)
    const lastRenewal = logOf(store, 'replace')[renewals - 1]!
    const takeover = logOf(store, 'replace').at(-1)!
    assert.ok(
      takeover.at >= lastRenewal.applied! + 1000 + MARGIN,
      'taken over before a lease after the last renewal',
    )
    assertSuccessiveHolds([
      { fence: held.fence, start: 0, end: lastValid },
      { fence: taken.fence, start: grantedAt, end: grantedAt },
    ])
    await assert.rejects(held.extend(), { code: 'FENCELOCK_LOST' })
    await taken.release()
    await holder.client.close()
    await waiter.client.close()
  })

  it('fences increase strictly across grant, release, takeover after a crashed holder, and release', async () => {
    const store = new FakeCasStore()
    const fences: bigint[] = []
    const a = processOn(store)
    const first = await a.client.acquire('k', { ttl: 300 })
    fences.push(first.fence)
    await first.release()
    const crashed = processOn(store)
    const second = await crashed.client.acquire('k', { ttl: 300, renew: false })
    fences.push(second.fence)
    crashed.crash()
    const c = processOn(store)
    const third = await c.client.acquire('k', { ttl: 300, timeout: 5000 })
    fences.push(third.fence)
    await third.release()
    const fourth = await a.client.acquire('k', { ttl: 300 })
    fences.push(fourth.fence)
    await fourth.release()
    assert.deepEqual(fences, [1n, 2n, 3n, 4n])
    assert.equal(store.json('k')!.fence, '4')
    for (const p of [a, c]) await p.client.close()
  })
})

describe('cas-lease: uncertain outcomes', () => {
  for (const fault of ['lose-reply', 'apply-then-refuse'] as const) {
    it(`a create that ${fault === 'lose-reply' ? 'lost its reply' : 'an SDK retry reported refused'} is granted once, by the re-read`, async () => {
      const store = new FakeCasStore()
      store.next('create', fault)
      const { client } = processOn(store)
      const lock = await client.acquire('k', { renew: false })
      assert.equal(lock.fence, 1n)
      assert.equal(logOf(store, 'create').length, 1)
      assert.equal(store.count('write'), 1, 'recognised by its nonce: not written again')
      assert.equal(store.json('k')!.owner, lock.owner)
      await lock.release()
      assert.equal(store.json('k')!.state, 'released')
      await client.close()
    })
  }

  it('a takeover of a released record whose reply was lost is granted once', async () => {
    const store = new FakeCasStore()
    const { client } = processOn(store)
    await (await client.acquire('k')).release()
    store.next('replace', 'lose-reply')
    const lock = await client.acquire('k', { renew: false })
    assert.equal(lock.fence, 2n)
    assert.equal(store.json('k')!.owner, lock.owner)
    await lock.release()
    await client.close()
  })

  it('a create that failed before it was applied is retried and granted', async () => {
    const store = new FakeCasStore()
    store.next('create', 'throw-before')
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false, timeout: 5000 })
    assert.equal(lock.fence, 1n)
    assert.equal(logOf(store, 'create').length, 1)
    await lock.release()
    await client.close()
  })

  it('renewals whose replies were lost count as renewed, and the next renewal writes over them', async () => {
    const store = new FakeCasStore()
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    store.next('replace', 'lose-reply')
    await lock.extend()
    store.returnCurrent = true
    store.next('replace', 'apply-then-refuse')
    const reads = store.count('read')
    await lock.extend()
    assert.equal(store.count('read'), reads, 'a refusal carrying the record needs no read')
    await lock.extend()
    assert.equal(store.json('k')!.owner, lock.owner)
    assert.equal(lock.signal.aborted, false)
    store.next('replace', 'lose-reply')
    await lock.release()
    assert.equal(store.json('k')!.state, 'released')
    await client.close()
  })

  it('a renewal that landed late is adopted: the lock stays held and the next renewal succeeds', async () => {
    const store = new FakeCasStore()
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    // The renewal is applied but answers nothing, and the re-read behind it fails too: unknown.
    store.next('replace', 'lose-reply').next('read', 503)
    await assert.rejects(lock.extend(), BackendUnavailableError)
    // The next renewal is conditioned on the old version: refused, then recognised as ours.
    await assert.rejects(lock.extend(), /landed late/)
    await lock.extend()
    assert.equal(lock.signal.aborted, false)
    await lock.release()
    assert.equal(store.json('k')!.state, 'released')
    await client.close()
  })

  it('releasing a late grant never releases the record a later attempt of the same acquire wrote over it', async () => {
    const store = new FakeCasStore()
    const { backend } = processOn(store)
    const req: AcquireRequest = { key: 'k', owner: 'f'.repeat(32), ttlMs: 5000 }
    // Attempt 1 is granted, but its answer reaches the core too late (after its bound): the core has
    // moved on, and attempt 2 finds the record of attempt 1 and writes it again, the grant it takes.
    const first = await backend.tryAcquire(req, signal())
    const taken = await backend.tryAcquire(req, signal())
    assert.ok(first.granted && taken.granted)
    // The core releases the late grant: it must leave the later grant's record alone.
    const lease = (g: typeof first) => ({
      key: 'k',
      owner: req.owner,
      fence: g.granted ? g.fence : 0n,
      cookie: g.granted ? g.cookie : undefined,
    })
    assert.equal(await backend.release(lease(first), signal()), false)
    assert.equal(store.json('k')!.state, 'held')
    assert.deepEqual(await backend.extend(lease(taken), 5000, signal()), { renewed: true })
    assert.deepEqual(await backend.extend(lease(first), 5000, signal()), { renewed: false })
    assert.equal(await backend.release(lease(taken), signal()), true)
  })

  it('a renewal refused because another owner took over reports the loss', async () => {
    const store = new FakeCasStore()
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    deadHolder(store, 'k', 5n, 1000)
    await assert.rejects(lock.extend(), { code: 'FENCELOCK_LOST' })
    assert.equal(store.json('k')!.fence, '5', 'nothing written over the new holder')
    await client.close()
  })

  const abandons = [
    {
      // The attempt's read, its create (applied, reply lost), and the re-read behind it fails: unknown.
      title: 'abandon after an unknown outcome leaves the record released (our create landed)',
      faults: (store: FakeCasStore) => store.next('create', 'lose-reply').next('read', 503, 1),
      fence: 1n,
    },
    {
      // Nothing applied, but a create in flight could still land: a released record (fence 0) stops it.
      title:
        'abandon after an unknown create that did not land leaves a released record, so it never lands later',
      faults: (store: FakeCasStore) => store.next('create', 'throw-before'),
      fence: 0n,
    },
  ]
  for (const { title, faults, fence } of abandons) {
    it(title, async () => {
      const store = new FakeCasStore()
      faults(store)
      const { client } = processOn(store)
      await assert.rejects(client.tryAcquire('k'), BackendUnavailableError)
      await waitUntil(() => store.json('k')?.state === 'released', 'the clean-up to leave a released record')
      assert.equal(store.json('k')!.fence, String(fence))
      const lock = await client.acquire('k', { renew: false })
      assert.equal(lock.fence, fence + 1n)
      await lock.release()
      await client.close()
    })
  }

  // The core gave up on an attempt whose replace on version V had already reached the store (the SDK
  // call rejected at once on abort); abandon then reads V, before the store commits that replace.
  const lateWrites = [
    { title: 'a released record', leaseMs: 0, put: (s: FakeCasStore) => released(s, 'k', 1n) },
    {
      title: 'a takeover after observed expiry',
      leaseMs: 200,
      put: (s: FakeCasStore) => deadHolder(s, 'k', 1n, 200),
    },
  ]
  for (const { title, leaseMs, put } of lateWrites) {
    it(`abandon stops our replace still in flight on the version it read (${title}): it never lands`, async () => {
      const store = new FakeCasStore()
      const v = put(store)
      const { backend, client } = processOn(store)
      let commit!: () => void
      const late = new Promise<void>((resolve) => {
        commit = resolve
      })
      store.next('replace', { late })
      const req: AcquireRequest = { key: 'k', owner: 'f'.repeat(32), ttlMs: 5000 }
      const stop = new AbortController()
      if (leaseMs > 0) {
        // A holder's record: seen once, then unchanged for longer than its lease plus the margin.
        assert.equal((await backend.tryAcquire(req, stop.signal)).granted, false)
        await sleep(leaseMs + MARGIN + 100)
      }
      const attempt = awaitLater(backend.tryAcquire(req, stop.signal))
      await waitUntil(() => store.count('replace') === 1, 'the replace to reach the store')
      stop.abort(new Error('the attempt ran out of time'))
      await assert.rejects(attempt)
      await backend.abandon(req, signal())
      const held = store.log.find((l) => l.op === 'replace')!
      commit()
      await waitUntil(() => held.done !== undefined, 'the store to be done with the late replace')
      assert.equal(held.applied, undefined, 'the late replace was refused')
      assert.notEqual(store.records.get('k')!.version, v)
      assert.deepEqual([store.json('k')!.state, store.json('k')!.fence], ['released', '1'])
      const lock = await client.acquire('k', { renew: false })
      assert.equal(lock.fence, 2n)
      await lock.release()
      await client.close()
    })
  }

  it('an owner that never wrote abandons without a request', async () => {
    const store = new FakeCasStore()
    deadHolder(store, 'k', 1n, 60_000)
    const { backend } = processOn(store)
    const req: AcquireRequest = { key: 'k', owner: 'e'.repeat(32), ttlMs: 1000 }
    assert.equal((await backend.tryAcquire(req, signal())).granted, false)
    const before = store.log.length
    await backend.abandon(req, signal())
    assert.equal(store.log.length, before)
  })

  it('429 and 503 from the store are retried by the core until it answers', async () => {
    const store = new FakeCasStore()
    store.next('read', 503).next('read', 429).next('create', 503)
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false, timeout: 5000 })
    assert.equal(lock.fence, 1n)
    await lock.release()
    await client.close()
  })
})

describe('cas-lease: waiting and the store rates', () => {
  it('answers attempts from what it saw until its next read is due, never later than a possible takeover', async () => {
    const store = new FakeCasStore()
    deadHolder(store, 'k', 1n, 60_000)
    const { backend } = processOn(store, { pollMaxMs: 1000 })
    const req: AcquireRequest = { key: 'k', owner: 'e'.repeat(32), ttlMs: 1000 }
    const first = await backend.tryAcquire(req, signal())
    const second = await backend.tryAcquire(req, signal())
    assert.equal(store.count('read'), 1, 'the second attempt, right after, sends no request')
    for (const busy of [first, second]) {
      assert.ok(!busy.granted && busy.retryInMs !== undefined && busy.retryInMs <= 1000)
    }
  })

  it('a new acquire reads afresh: a tryAcquire just after a release elsewhere gets the lock', async () => {
    const store = new FakeCasStore()
    const a = processOn(store)
    const b = processOn(store, { pollMaxMs: 5000 })
    const held = await a.client.acquire('k')
    assert.equal(await b.client.tryAcquire('k'), null)
    await held.release()
    const lock = await b.client.tryAcquire('k')
    assert.equal(lock?.fence, 2n)
    await lock!.release()
    await a.client.close()
    await b.client.close()
  })

  it('paces its reads of a held key: a few per second at most', async () => {
    const store = new FakeCasStore()
    const holder = processOn(store)
    const held = await holder.client.acquire('k', { ttl: 60_000 })
    const waiter = processOn(store, { pollMaxMs: 1000 })
    const reads = store.count('read')
    assert.equal(await waiter.client.tryAcquire('k', { timeout: 2000 }), null)
    // Paced: reads at 0, 0.1, 0.3, 0.7, 1.5 s (+ the last attempt's); the core alone would poll every 250 ms.
    assert.ok(store.count('read') - reads <= 7, `${store.count('read') - reads} reads in 2 s`)
    await held.release()
    await holder.client.close()
    await waiter.client.close()
  })

  it('waiters of one key in one process share their reads: 100 waiters read no more than one does', async () => {
    // Reads per waiting second of `waiters` acquires of one held key in one process.
    const readsPerSecond = async (waiters: number) => {
      const store = new FakeCasStore()
      // A round trip, so that attempts meet reads in flight, as they do on a real store.
      store.delayMs = 5
      const holder = processOn(store)
      const held = await holder.client.acquire('k', { ttl: 60_000 })
      const waiter = processOn(store, { pollMaxMs: 1000 })
      const before = store.count('read')
      const startedAt = performance.now()
      const all = Array.from({ length: waiters }, () => waiter.client.tryAcquire('k', { timeout: 3000 }))
      const got = await Promise.all(all)
      const seconds = (performance.now() - startedAt) / 1000
      assert.ok(got.every((lock) => lock === null))
      await held.release()
      await holder.client.close()
      await waiter.client.close()
      return (store.count('read') - before) / seconds
    }
    const one = await readsPerSecond(1)
    const ten = await readsPerSecond(10)
    const hundred = await readsPerSecond(100)
    const rates = `reads per second: 1 waiter ${one.toFixed(1)}, 10: ${ten.toFixed(1)}, 100: ${hundred.toFixed(1)}`
    assert.ok(ten <= 2 * one && hundred <= 2 * one, rates)
  })

  it('a release seen by 100 waiters of one process costs one grant write, not 100', async () => {
    const store = new FakeCasStore()
    store.delayMs = 5
    const holder = processOn(store)
    const held = await holder.client.acquire('k', { ttl: 60_000 })
    const waiter = processOn(store, { pollMaxMs: 200 })
    const all = Array.from({ length: 100 }, () =>
      awaitLater(waiter.client.tryAcquire('k', { timeout: 3000, ttl: 60_000 })),
    )
    await sleep(500)
    const before = store.count('write')
    await held.release()
    const got = await Promise.all(all)
    const winners = got.filter((lock) => lock !== null)
    assert.equal(winners.length, 1)
    // The release, then one grant: the other waiters waited for its outcome and saw the key held.
    assert.equal(store.count('write') - before, 2)
    await winners[0]!.release()
    await holder.client.close()
    await waiter.client.close()
  })

  it('backs off when its reads lag its writes: a refused takeover whose re-read shows the same version', async () => {
    const store = new FakeCasStore()
    const holder = processOn(store)
    const held = await holder.client.acquire('k', { ttl: 1000 })
    // The waiter's reads go through a cache: it sees the version of its first read while the holder
    // renews, so after a lease plus the margin it tries to take over, and the store refuses.
    const view = store.view()
    let writes = 0
    const counted = {
      ...view,
      replace: (...args: Parameters<typeof view.replace>) => {
        writes += 1
        return view.replace(...args)
      },
    }
    const waiter = createLockClient(casLeaseBackend(counted, { marginMs: MARGIN, pollMaxMs: 1000 }))
    view.cacheReads(true)
    const startedAt = performance.now()
    assert.equal(await waiter.tryAcquire('k', { timeout: 4000, ttl: 1000 }), null)
    const seconds = (performance.now() - startedAt) / 1000 - 1
    assert.equal(held.signal.aborted, false, 'the holder kept its lock')
    // Refused writes in the ~3 s after the takeover became possible: 100, 200, 400, 800 ms, then 1 s.
    assert.ok(writes <= 10, `${writes} refused conditional writes in ${seconds.toFixed(1)} s`)
    // Once its reads catch up, a release is seen and the lock taken.
    view.cacheReads(false)
    await held.release()
    const lock = await waiter.acquire('k', { timeout: 5000, ttl: 1000 })
    await lock.release()
    await holder.client.close()
    await waiter.close()
  })

  it('never writes one record faster than the store allows (GCS: one write per second)', async () => {
    const store = new FakeCasStore()
    store.minWriteIntervalMs = 200
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    // Too soon for a write: the renewal waits for the store's rate.
    await lock.extend()
    await lock.release()
    // Right after our own release: a free lock, so even a tryAcquire waits for the rate, not refuses.
    const next = await client.tryAcquire('k', { renew: false })
    assert.equal(next?.fence, 2n)
    await next!.release()
    const writes = store.log.filter((l) => l.op !== 'read')
    for (let i = 1; i < writes.length; i++) {
      assert.ok(writes[i]!.at - writes[i - 1]!.at >= 200, `writes ${i - 1} and ${i} closer than 200 ms`)
    }
    assert.equal(writes.length, 5)
    await client.close()
  })

  it('spaces each write from when the previous one was answered, not sent (a slow write commits late)', async () => {
    const store = new FakeCasStore()
    store.minWriteIntervalMs = 200
    // Each write is applied at the end of its delay, just before its answer: a store's per-object rate
    // counts from there, so a write sent 200 ms after the previous one was SENT would come too soon.
    store.delayMs = 120
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    await lock.extend()
    await lock.extend()
    await lock.release()
    const writes = store.log.filter((l) => l.op !== 'read')
    assert.equal(writes.length, 4)
    for (let i = 1; i < writes.length; i++) {
      const gap = writes[i]!.at - writes[i - 1]!.applied!
      assert.ok(
        gap >= 200,
        `write ${i} reached the store ${gap.toFixed(0)} ms after write ${i - 1} was applied`,
      )
    }
    await client.close()
  })

  it('on a store that ignores conditions (lax) it does not crash; doctor is what catches such a store', async () => {
    const store = new FakeCasStore()
    store.lax = true
    store.delayMs = 1
    const processes = Array.from({ length: 3 }, () => processOn(store))
    const outcomes = await Promise.allSettled(
      processes.flatMap(({ client }) =>
        Array.from({ length: 3 }, async () => {
          const lock: Lock = await client.acquire('k', { timeout: 1000, ttl: 300 })
          await sleep(5)
          await lock.release()
        }),
      ),
    )
    for (const o of outcomes) {
      if (o.status === 'rejected') assert.ok(o.reason instanceof LockError, String(o.reason))
    }
    for (const { client } of processes) await client.close()
  })
})

describe("cas-lease: fences lifted to the server's clock (cas/fence.ts)", () => {
  const epoch = (seconds: number) => BigInt(seconds) << 20n
  const writes = (store: FakeCasStore) =>
    store.log.filter((l) => l.op !== 'read' && l.applied).map((l) => l.op)

  it('a new record is a fresh placeholder until the store clock settles E(T + 2); then replaced: the grant', async () => {
    const store = new FakeCasStore()
    let now = 1_000
    store.clock = () => now
    const { client } = processOn(store)
    const acquiring = client.acquire('k', { renew: false, timeout: 30_000 })
    acquiring.catch(() => {})
    await waitUntil(() => store.records.has('k'), 'the placeholder written')
    assert.deepEqual([store.json('k')!.fresh, store.json('k')!.fence], [true, String(epoch(1_002))])
    // The store's clock still shows 1001: E(1002) is not settled, so nobody is granted with it.
    now = 1_001
    await sleep(1500)
    assert.equal(store.json('k')!.fresh, true, 'no grant before the store shows second 1002')
    now = 1_002
    const first = await acquiring
    assert.equal(first.fence, epoch(1_002))
    assert.deepEqual(writes(store), ['create', 'replace'])
    assert.equal(store.json('k')!.fresh, undefined, 'the grant is the unmarked replace')
    await first.extend()
    await first.release()
    assert.equal(store.json('k')!.fence, String(epoch(1_002)))
    const second = await client.acquire('k', { renew: false })
    assert.equal(second.fence, epoch(1_002) + 1n, 'the epoch is below the counter: counted')
    await second.release()
    now = 2_000
    const third = await client.acquire('k', { renew: false })
    assert.equal(third.fence, epoch(2_000), 'the epoch is above the counter: lifted')
    await third.release()
    await client.close()
  })

  // A new record's grant waits for the store's clock to tick twice. Inside one attempt that wait (1 to 2 s,
  // longer on a slow store) ran into the attempt's bound under load: the acquire failed as unavailable.
  it("no attempt waits for the store's clock: the placeholder's attempt answers, a later one grants", async () => {
    const store = new FakeCasStore()
    let now = 1_000
    store.clock = () => now
    const { backend } = processOn(store)
    const answered: AttemptResult[] = []
    const client = createLockClient(
      {
        ...backend,
        tryAcquire: async (req, signal) => {
          const result = await backend.tryAcquire(req, signal)
          answered.push(result)
          return result
        },
      },
      { ttl: 2000 },
    )
    const acquiring = client.acquire('k', { renew: false, timeout: 60_000 })
    acquiring.catch(() => {})
    // The store's clock stands still: an attempt that waited for it would not answer at all.
    await waitUntil(() => answered.length >= 3, 'attempts answered while the store clock stands still', {
      withinMs: 20_000,
    })
    assert.ok(
      answered.every((r) => !r.granted && r.pending === true && r.retryInMs! > 0),
      JSON.stringify(answered.slice(0, 3), (_, v) => (typeof v === 'bigint' ? String(v) : v)),
    )
    assert.equal(store.json('k')!.fresh, true, 'the placeholder waits, ungranted')
    // Still for longer than one attempt may take (5 s): a slow store's clock, as seen by its clients.
    await sleep(6000)
    assert.deepEqual(writes(store), ['create'])
    now = 1_002
    const lock = await acquiring
    assert.equal(lock.fence, epoch(1_002))
    assert.deepEqual(writes(store), ['create', 'replace'])
    await lock.release()
    await client.close()
  })

  it('a tryAcquire of a new name is granted: the core tries again while the grant settles', async () => {
    const store = new FakeCasStore()
    store.ticking(1_000)
    const { client } = processOn(store)
    const lock = await client.tryAcquire('new', { renew: false })
    assert.ok(lock, 'a free name is granted to a tryAcquire')
    assert.equal(store.json('new')!.fresh, undefined)
    await lock.release()
    await client.close()
  })

  it("a new record's grant after the clock wait: its lease and its renewals' are the ttl asked", async () => {
    const store = new FakeCasStore()
    let now = 1_000
    store.clock = () => now
    const { client, backend } = processOn(store)
    const acquiring = client.acquire('k', { ttl: 2000, renew: false, timeout: 30_000 })
    acquiring.catch(() => {})
    await waitUntil(() => store.json('k')?.fresh === true, 'the placeholder written')
    await sleep(1500)
    now = 1_002
    const lock = await acquiring
    const leaseOf = () => Number(store.json('k')!.leaseMs)
    assert.equal(leaseOf(), 2000, 'the grant writes the ttl asked')
    const info = await backend.inspect('k', signal())
    assert.ok(info?.expiresInMs !== undefined && info.expiresInMs <= 2000, `expiresInMs ${info?.expiresInMs}`)
    await lock.extend()
    assert.equal(leaseOf(), 2000, 'a renewal writes the ttl asked, not the one counted from the attempt')
    await lock.release()
    await client.close()
  })

  it('an acquire given up during its clock wait leaves the key free for the next waiter', async () => {
    const store = new FakeCasStore()
    store.ticking(1_000)
    const a = processOn(store)
    const b = processOn(store)
    const gaveUp = new AbortController()
    const acquiring = a.client.acquire('k', { ttl: 30_000, renew: false, signal: gaveUp.signal })
    const refused = assert.rejects(acquiring)
    await waitUntil(() => store.json('k')?.fresh === true, "a's placeholder")
    gaveUp.abort(new Error('gave up'))
    await refused
    // The placeholder's lease is the ttl (30 s) and more: sitting it out would fail this timeout.
    const lock = await b.client.acquire('k', { ttl: 30_000, renew: false, timeout: 15_000 })
    await lock.release()
    await Promise.all([a.client.close(), b.client.close()])
  })

  // A creator cut off during its clock wait leaves its placeholder held: waiters sit out its lease, so
  // it is the ttl (the lease any holder leaves behind), with room for the clock wait under a short ttl.
  for (const [ttl, placeholderMs] of [
    [30_000, 30_000],
    [1_000, 3_000],
  ] as const) {
    it(`a placeholder's lease for a ttl of ${ttl} ms is ${placeholderMs} ms`, async () => {
      const store = new FakeCasStore()
      store.clock = () => 1_000
      const a = processOn(store)
      const acquiring = a.client.acquire('k', { ttl, renew: false, timeout: 30_000 })
      acquiring.catch(() => {})
      await waitUntil(() => store.json('k')?.fresh === true, 'the placeholder')
      assert.equal(Number(store.json('k')!.leaseMs), placeholderMs)
      store.clock = () => 1_002
      await (await acquiring).release()
      await a.client.close()
    })
  }

  it('a grant on a record younger than its fence waits until the store clock settles it', async () => {
    const store = new FakeCasStore()
    let now = 1_000
    store.clock = () => now
    released(store, 'k', epoch(1_002) + 5n)
    const { client } = processOn(store)
    const acquiring = client.acquire('k', { renew: false, timeout: 30_000 })
    acquiring.catch(() => {})
    await sleep(1500)
    assert.equal(store.json('k')!.state, 'released', 'E(1002) + 6 is not granted at second 1000')
    now = 1_002
    const lock = await acquiring
    assert.equal(lock.fence, epoch(1_002) + 6n)
    await lock.release()
    await client.close()
  })

  // What the fence rule is for: an operator (or fencelock's own retire) may delete a record at any age,
  // also within the second of its creation, and the next grant of the key must still be greater.
  for (const wipe of ['the record', 'every record'] as const) {
    it(`${wipe} deleted right after a grant (a young record): the next fence is still greater`, async () => {
      const store = new FakeCasStore()
      store.ticking(1_000)
      const a = processOn(store)
      const b = processOn(store)
      const fences: bigint[] = []
      for (let i = 0; i < 3; i++) {
        const lock = await a.client.acquire('k', { renew: false, timeout: 30_000 })
        fences.push(lock.fence)
        if (wipe === 'the record') store.records.delete('k')
        else store.records.clear()
        const next = await b.client.acquire('k', { renew: false, timeout: 30_000 })
        fences.push(next.fence)
        assert.ok(next.fence > lock.fence, `${next.fence} > ${lock.fence} (fences ${fences.join(', ')})`)
        store.records.clear()
      }
      await Promise.all([a.client.close(), b.client.close()])
    })
  }

  it('a placeholder deleted while its creator waits: the creator is not granted with it', async () => {
    const store = new FakeCasStore()
    let now = 1_000
    store.clock = () => now
    const a = processOn(store)
    const b = processOn(store)
    const holds: Array<{ who: string; fence: bigint }> = []
    const first = a.client.acquire('k', { renew: false, timeout: 30_000 }).then(async (lock) => {
      holds.push({ who: 'a', fence: lock.fence })
      await lock.release()
    })
    first.catch(() => {})
    await waitUntil(() => store.json('k')?.fresh === true, "a's placeholder")
    store.records.delete('k')
    const second = b.client.acquire('k', { renew: false, timeout: 30_000 }).then(async (lock) => {
      holds.push({ who: 'b', fence: lock.fence })
      await lock.release()
    })
    second.catch(() => {})
    await waitUntil(() => store.json('k')?.fresh === true, "b's placeholder")
    now = 1_002
    await Promise.all([first, second])
    assert.deepEqual(
      holds.map((h) => h.who),
      ['b', 'a'],
      "a's placeholder is gone: b is granted first",
    )
    assert.ok(holds[1]!.fence > holds[0]!.fence, `${holds[1]!.fence} > ${holds[0]!.fence}`)
    await Promise.all([a.client.close(), b.client.close()])
  })

  it('a record of an older version (a fence counted from 1) keeps working: its next fence jumps forward', async () => {
    const store = new FakeCasStore()
    store.clock = () => 1_000
    released(store, 'k', 5n)
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    assert.equal(lock.fence, epoch(1_000))
    await lock.release()
    await client.close()
  })

  it('a create answered over a second after its read is granted with the fence of its answer', async () => {
    const store = new FakeCasStore()
    // The read answers at 1000, the create at 1005 (sent late): it may have landed after another record
    // of the key was made, used and deleted in between, so its placeholder's E(1002) is not handed out.
    store.clock = (op) => (op === 'create' ? 1_005 : store.count('create') > 0 ? 1_007 : 1_000)
    const { client } = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    assert.equal(lock.fence, epoch(1_007))
    assert.deepEqual(writes(store), ['create', 'replace'])
    assert.equal(store.json('k')!.fence, String(epoch(1_007)))
    assert.equal(store.json('k')!.owner, lock.owner)
    await lock.release()
    await client.close()
  })

  it('an earlier attempt of ours found in place, still fresh (maybe a late create), is granted with a fence made now', async () => {
    const store = new FakeCasStore()
    const clock = store.ticking(1_000)
    store.next('create', 'lose-reply')
    store.next('read', 'throw-before', 1) // the re-read after the lost reply fails too: outcome unknown
    const { client } = processOn(store)
    const acquiring = client.acquire('k', { renew: false, timeout: 30_000 })
    acquiring.catch(() => {})
    await waitUntil(() => store.records.has('k'), 'the lost create landed')
    clock.jump(10) // the next attempt's read comes ten seconds later, on the store's clock
    const lock = await acquiring
    assert.ok(lock.fence >= epoch(1_012), `${lock.fence} lifted to at least E(1012)`)
    await lock.release()
    await client.close()
  })

  it('a server clock beyond 2^40 seconds is refused, not turned into a fence', async () => {
    const store = new FakeCasStore()
    store.clock = () => 2 ** 41
    const { client } = processOn(store)
    await assert.rejects(client.acquire('k', { timeout: 5000 }), (error: Error) => {
      assert.ok(error instanceof BackendUnavailableError, String(error))
      assert.equal(error.retryable, false)
      assert.match(error.message, /server's clock .* fix the server's clock/)
      return true
    })
    await client.close()
  })
})
