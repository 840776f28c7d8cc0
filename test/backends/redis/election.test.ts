/**
 * The Redis election against a real server, for what the conformance cases cannot see: the keys on the
 * store, the separation from locks of the same name, proclaim refused on the store after a takeover or a
 * new term, terms that survive the loss of the election's keys, the observers' wake-ups over pub/sub, and a
 * killed leader's keys gone after its lease.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, describe, it } from 'node:test'
import type { Redis } from 'ioredis'
import { redisElectionKeys } from '../../../src/backends/redis/election/layout.js'
import type { RedisBackend } from '../../../src/backends/redis/index.js'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import type { ElectionFacet, HeldLease } from '../../../src/core/backend.js'
import type { ClientOptions } from '../../../src/index.js'
import { sleep } from '../../support/time.js'
import { pollUntil } from '../../support/wait.js'
import { redisTestServer } from './fixture.js'

const store = redisTestServer()
const name = (label: string) => `election-${label}-${randomBytes(3).toString('hex')}`
const client = (options: ClientOptions = {}) => store.client(options)
/** A backend over its own connection, and its election facet. */
function facet(): { backend: RedisBackend; election: ElectionFacet; redis: Redis } {
  const redis = store.connection()
  const backend = store.backend(redis)
  return { backend, election: backend.election!, redis }
}
/** A signal that never aborts, for calling a facet directly. */
const live = new AbortController().signal
/** The bound of every wait: liveness on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

/** Tells whether `promise` has settled, without waiting for it. */
function tracked(promise: Promise<unknown>): { readonly settled: boolean; readonly done: Promise<unknown> } {
  const state = { settled: false, done: promise }
  promise.then(
    () => {
      state.settled = true
    },
    () => {
      state.settled = true
    },
  )
  return state
}

/** Resolves when `promise` settles, or fails the test after the generous bound. */
async function settles(promise: Promise<unknown>, what: string): Promise<void> {
  const timer = new AbortController()
  const late = sleep(WITHIN.withinMs, timer.signal).then(() => 'late' as const)
  const outcome = await Promise.race([promise.then(() => 'settled' as const), late]).finally(() =>
    timer.abort(),
  )
  assert.equal(outcome, 'settled', `${what}: the watch did not wake within ${WITHIN.withinMs} ms`)
}

describe('redis election: storage', () => {
  it('stores the leader with a PX lease, its value beside it, and the term from the server clock', async () => {
    const el = name('layout')
    const k = redisElectionKeys(el)
    const [seconds = 0, micros = 0] = await store.admin.time()
    const lead = await client({ ttl: '20s', holder: 'node-7' })
      .election(el)
      .campaign({ value: 'http://a:80 é' })
    assert.equal(await store.admin.get(k.leader), lead.owner)
    assert.equal(await store.admin.get(k.value), `${lead.owner} http://a:80 é`)
    assert.equal(await store.admin.get(k.holder), `${lead.owner} node-7`)
    assert.equal(await store.admin.get(k.term), lead.term.toString())
    assert.ok(
      lead.term >= BigInt(seconds) * 1_000_000n + BigInt(micros),
      'the term is the server clock in µs',
    )
    for (const key of [k.leader, k.value, k.holder]) {
      const pttl = await store.admin.pttl(key)
      assert.ok(pttl > 0 && pttl <= 20_000, `${key} expires with the lease (${pttl})`)
    }
    assert.ok((await store.admin.pttl(k.term)) > 20_000, 'the term outlives the lease')
    await lead.resign()
    assert.equal(await store.admin.exists(k.leader, k.value, k.holder), 0, 'a resign leaves only the term')
    assert.equal(await store.admin.get(k.term), lead.term.toString())
  })

  it('keeps an election apart from the lock of the same name', async () => {
    const shared = name('shared')
    const locks = client({ ttl: '20s' })
    const lock = await locks.acquire(shared)
    const lead = await locks.election(shared).campaign({ value: 'v', timeout: 0 })
    assert.equal((await store.admin.get(redisLockKeys(shared).lock))?.split(' ')[0], lock.owner)
    assert.equal(await store.admin.get(redisElectionKeys(shared).leader), lead.owner)
    const listed: string[] = []
    for await (const held of locks.list(shared)) listed.push(`${held.key} ${held.owner}`)
    assert.deepEqual(listed, [`${shared} ${lock.owner}`], 'list shows the lock, never the election')
    await lead.resign()
    assert.equal((await locks.inspect(shared)).owner, lock.owner, 'resigning left the lock alone')
    const next = await locks.election(shared).campaign({ timeout: 0 })
    await lock.release()
    const view = await locks.election(shared).leader()
    assert.ok(view.leader && view.owner === next.owner, 'releasing left the leader alone')
    await next.resign()
  })

  it('gives a greater term after the election keys are gone (the server clock is the floor)', async () => {
    const el = name('terms')
    const k = redisElectionKeys(el)
    const elections = client({ ttl: '20s' }).election(el)
    const first = await elections.campaign()
    await first.resign()
    assert.equal(await store.admin.del(k.term), 1)
    const second = await elections.campaign()
    assert.ok(second.term > first.term, `term ${second.term} after ${first.term}`)
    await second.resign()
  })

  it('a retried campaign that finds itself leading without a term key gets a fresh term, above the last', async () => {
    // The first attempt's reply was lost (its term never heard), then the term key was evicted.
    const el = name('retry')
    const k = redisElectionKeys(el)
    const earlier = await client({ ttl: '20s' }).election(el).campaign()
    await earlier.resign()
    const { election } = facet()
    const req = { key: el, owner: randomBytes(16).toString('hex'), ttlMs: 20_000 }
    const first = await election.tryAcquire(req, live)
    assert.ok(first.granted && first.fence > earlier.term)
    await store.admin.del(k.term)
    const retry = await election.tryAcquire(req, live)
    assert.ok(retry.granted, 'the retry recognises its leadership')
    assert.ok(retry.fence > first.fence, `term ${retry.fence} after ${first.fence}`)
  })

  it('a read-back that finds the campaign leading without a term key grants nothing', async () => {
    const el = name('readback')
    const owner = randomBytes(16).toString('hex')
    const redis = store.connection()
    let lose = false
    // The campaign runs on the server, the term key is evicted, and the campaign's reply is lost.
    const lossy = new Proxy(redis, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target)
        if (prop !== 'evalsha') return typeof value === 'function' ? value.bind(target) : value
        return async (...args: unknown[]) => {
          const result = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)
          if (lose && args.includes(owner)) {
            lose = false
            await store.admin.del(redisElectionKeys(el).term)
            throw new Error('Connection is closed.')
          }
          return result
        }
      },
    })
    const backend = store.backend(lossy as Redis)
    const election = backend.election!
    await election.tryAcquire({ key: name('warm'), owner: 'warm', ttlMs: 1000 }, live)
    lose = true
    const lost = await election.tryAcquire({ key: el, owner, ttlMs: 20_000 }, live).then(
      (result) => (result.granted ? result.fence : undefined),
      () => undefined,
    )
    assert.equal(lost, undefined, `granted with term ${lost} while the store kept none`)
  })
})

describe('redis election: proclaim is checked on the store', () => {
  it('refuses a proclaim after another candidate took over, and keeps its value', async () => {
    const el = name('takeover')
    const { election } = facet()
    const old = await election.tryAcquire({ key: el, owner: 'old', ttlMs: 30_000, value: 'a' }, live)
    assert.ok(old.granted)
    // The old leader's lease ends (as if it paused past it): another candidate leads.
    await store.admin.del(redisElectionKeys(el).leader)
    const next = await election.tryAcquire({ key: el, owner: 'next', ttlMs: 30_000, value: 'b' }, live)
    assert.ok(next.granted && next.fence > old.fence)
    const stale: HeldLease = { key: el, owner: 'old', fence: old.fence, cookie: undefined }
    assert.deepEqual(await election.proclaim(stale, 'late', live), { proclaimed: false })
    assert.equal(await store.admin.get(redisElectionKeys(el).value), 'next b')
    assert.equal((await election.inspect(el, live))?.value, 'b')
  })

  it('refuses a proclaim with an earlier term of the same owner (checked by term, not owner alone)', async () => {
    const el = name('term-check')
    const { election } = facet()
    const req = { key: el, owner: 'same', ttlMs: 30_000, value: 'one' }
    const first = await election.tryAcquire(req, live)
    assert.ok(first.granted)
    const lease = (fence: bigint): HeldLease => ({ key: el, owner: 'same', fence, cookie: undefined })
    assert.equal(await election.release(lease(first.fence), live), true)
    const second = await election.tryAcquire({ ...req, value: 'two' }, live)
    assert.ok(second.granted && second.fence > first.fence)
    assert.deepEqual(await election.proclaim(lease(first.fence), 'stale', live), { proclaimed: false })
    assert.equal((await election.inspect(el, live))?.value, 'two')
    assert.deepEqual(await election.proclaim(lease(second.fence), 'three', live), { proclaimed: true })
    assert.equal((await election.inspect(el, live))?.value, 'three')
  })
})

describe('redis election: watch', () => {
  it('wakes every observer on a grant, a proclaim and a resign, and not while nothing changes', async () => {
    const el = name('watch')
    const { election } = facet()
    const stop = new AbortController()
    after(() => stop.abort())
    // The first wait subscribes, and wakes once the server confirms it (a change before then is missed).
    await settles(election.watch!(el, stop.signal), 'subscribed')
    const observers = () => [
      tracked(election.watch!(el, stop.signal)),
      tracked(election.watch!(el, stop.signal)),
    ]

    let waiting = observers()
    await sleep(300)
    assert.ok(!waiting.some((w) => w.settled), 'a watch woke while nothing changed')
    // A lock of the same name is another thing: its release wakes no observer of the election.
    const locks = client({ ttl: '20s' })
    await (await locks.acquire(el)).release()
    await sleep(300)
    assert.ok(!waiting.some((w) => w.settled), "a lock's release woke an observer of the election")

    const req = { key: el, owner: 'leader', ttlMs: 30_000, value: 'a' }
    const grant = await election.tryAcquire(req, live)
    assert.ok(grant.granted)
    for (const w of waiting) await settles(w.done, 'grant')

    waiting = observers()
    const lease: HeldLease = { key: el, owner: 'leader', fence: grant.fence, cookie: undefined }
    assert.deepEqual(await election.proclaim(lease, 'b', live), { proclaimed: true })
    for (const w of waiting) await settles(w.done, 'proclaim')

    waiting = observers()
    assert.equal(await election.release(lease, live), true)
    for (const w of waiting) await settles(w.done, 'resign')
  })

  it('wakes a waiting candidate on a resign, through the public API', async () => {
    const el = name('candidate')
    const [a, b] = [client({ ttl: '20s' }), client({ ttl: '20s' })]
    const first = await a.election(el).campaign({ value: 'a' })
    const campaign = b.election(el).campaign({ value: 'b' })
    const waiting = tracked(campaign)
    await sleep(300)
    assert.ok(!waiting.settled)
    await first.resign()
    await settles(waiting.done, 'the candidate')
    const second = await campaign
    assert.ok(second.term > first.term)
    await second.resign()
  })
})

describe('redis election: a killed leader', () => {
  it('leaves nothing but its term once its lease ends, and another candidate leads', async () => {
    const el = name('killed')
    const k = redisElectionKeys(el)
    const { backend, election, redis } = facet()
    const dead = await election.tryAcquire({ key: el, owner: 'dead', ttlMs: 1500, value: 'gone' }, live)
    assert.ok(dead.granted)
    // Killed: its connections close with no resign.
    await backend.close()
    redis.disconnect()
    const next = await client({ ttl: '20s' }).election(el).campaign({ value: 'alive', timeout: '60s' })
    assert.ok(next.term > dead.fence)
    await pollUntil(
      () => store.admin.get(k.value),
      (v) => v === `${next.owner} alive`,
      WITHIN,
    )
    await next.resign()
    assert.equal(await store.admin.exists(k.leader, k.value, k.holder), 0)
  })
})
