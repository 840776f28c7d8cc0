/**
 * The Redis semaphore against a real server, for what the conformance cases cannot see: its keys on the
 * store (one hash tag, apart from a lock of the same name), leases ended by the server's clock, the line
 * that keeps a large request from being passed, places that lapse, the waiter named on the channel, the
 * sequence after the semaphore was forgotten, and storage gone when it is idle or its holders died.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { describe, it } from 'node:test'
import type { Redis } from 'ioredis'
import { slotOf } from '../../../src/backends/redis/keys.js'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import { redisSemaphoreKeys } from '../../../src/backends/redis/semaphore/layout.js'
import { ACQUIRE } from '../../../src/backends/redis/semaphore/scripts.js'
import type { AcquireRequest, Grant, SemaphoreFacet } from '../../../src/core/backend.js'
import { pollUntil } from '../../support/wait.js'
import { redisTestServer } from './fixture.js'

const store = redisTestServer()
const name = (label: string) => `sem-${label}-${randomBytes(3).toString('hex')}`
const owner = () => randomBytes(16).toString('hex')
/** A signal that never aborts, for calling a facet directly. */
const live = new AbortController().signal
/** The bound of every wait: liveness on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

const facet = (): SemaphoreFacet => store.backend().semaphore!
const request = (key: string, limit: number, permits = 1, ttlMs = 20_000): AcquireRequest => ({
  key,
  owner: owner(),
  ttlMs,
  semaphore: { limit, permits },
})
async function granted(sem: SemaphoreFacet, req: AcquireRequest): Promise<Grant> {
  const result = await sem.tryAcquire(req, live)
  assert.ok(result.granted, `${req.owner} was granted`)
  return result
}
/** The server's clock in ms. */
async function serverNow(): Promise<number> {
  const [s, us] = await store.admin.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
}
const keysOf = (key: string) => {
  const k = redisSemaphoreKeys(key)
  return [k.limit, k.sequence, k.leases, k.grants, k.line, k.kept]
}

describe('redis semaphore: storage', () => {
  it('keeps its keys under one hash tag, apart from a lock of the same name', async () => {
    const key = name('layout')
    const locks = store.client({ ttl: '20s' })
    const permit = await locks.semaphore(key, { limit: 1 }).acquire()
    const k = redisSemaphoreKeys(key)
    assert.ok(k.limit.startsWith(`fencelock:!semaphore{${key}}`))
    assert.equal(new Set(keysOf(key).map(slotOf)).size, 1, 'one Cluster slot')
    assert.equal(await store.admin.get(k.limit), '1')
    assert.deepEqual(await store.admin.zrange(k.leases, '0', '-1'), [permit.owner])
    assert.match((await store.admin.hget(k.grants, permit.owner)) ?? '', new RegExp(`^1 ${permit.sequence} `))
    // The semaphore's only permit is held; a lock of the same name is another thing.
    const lock = await locks.tryAcquire(key)
    assert.ok(lock, 'the lock of the same name is free')
    assert.equal(await store.admin.exists(redisLockKeys(key).lock), 1)
    const listed: string[] = []
    for await (const l of locks.list()) listed.push(l.key)
    assert.deepEqual(listed, [key], '`list` shows the lock, not the semaphore')
    await lock.release()
    await permit.release()
  })

  it('forgets an idle semaphore but its sequence, which keeps rising after it is gone', async () => {
    const key = name('forget')
    const sem = facet()
    const first = request(key, 2)
    const grant = await granted(sem, first)
    assert.equal(
      await sem.release({ key, owner: first.owner, fence: grant.fence, cookie: undefined }, live),
      true,
    )
    const k = redisSemaphoreKeys(key)
    assert.deepEqual(
      await store.admin.exists(k.limit, k.leases, k.grants, k.line, k.kept),
      0,
      'nothing but the sequence is kept once nothing holds or waits',
    )
    assert.equal(await store.admin.exists(k.sequence), 1)
    await store.admin.del(k.sequence)
    // Forgotten whole: the next acquire stores its own limit, and its sequence is still larger.
    const again = await granted(sem, request(key, 5))
    assert.ok(again.fence > grant.fence, `sequence ${again.fence} after ${grant.fence}`)
    assert.equal(await store.admin.get(k.limit), '5')
  })

  it('leaves nothing behind once the leases of holders that died have ended', async () => {
    const key = name('died')
    const sem = facet()
    await granted(sem, request(key, 3, 1, 1500))
    await granted(sem, request(key, 3, 2, 1000))
    const k = redisSemaphoreKeys(key)
    const ttl = await store.admin.pttl(k.limit)
    assert.ok(ttl > 0 && ttl <= 1500, `the keys expire with the last lease (PTTL ${ttl})`)
    // Nobody calls again: the server's own expiry removes them.
    await pollUntil(
      () => store.admin.exists(k.limit, k.leases, k.grants),
      (n) => n === 0,
      WITHIN,
    )
  })
})

describe('redis semaphore: the server decides', () => {
  it('ends a lease by the server clock', async () => {
    const key = name('clock')
    const sem = facet()
    const held = request(key, 1)
    await granted(sem, held)
    const k = redisSemaphoreKeys(key)
    const ends = Number(await store.admin.zscore(k.leases, held.owner))
    const now = await serverNow()
    assert.ok(Math.abs(ends - (now + 20_000)) < 5_000, `lease ends at ${ends}, server now ${now}`)
    const other = request(key, 1)
    assert.equal((await sem.tryAcquire(other, live)).granted, false)
    // Its end moved to the server's present: the next attempt finds it ended, with no release.
    await store.admin.zadd(k.leases, await serverNow(), held.owner)
    await granted(sem, other)
    assert.deepEqual(await store.admin.zrange(k.leases, '0', '-1'), [other.owner])
    assert.equal(await store.admin.hexists(k.grants, held.owner), 0, 'the ended lease is purged')
  })

  it('lets no small request pass a large one first in line', async () => {
    const key = name('line')
    const sem = facet()
    const one = request(key, 2)
    const onePermit = await granted(sem, one)
    const large = request(key, 2, 2)
    const queued = await sem.tryAcquire(large, live)
    assert.equal(queued.granted, false)
    assert.equal(!queued.granted && queued.queued, true, 'the large request waits in line')
    const small = request(key, 2, 1)
    const refused = await sem.tryAcquire(small, live)
    assert.equal(refused.granted, false, 'one permit is free, but the request for two is first in line')
    assert.deepEqual(await store.admin.zrange(redisSemaphoreKeys(key).line, '0', '-1'), [
      large.owner,
      small.owner,
    ])
    await sem.release({ key, owner: one.owner, fence: onePermit.fence, cookie: undefined }, live)
    await granted(sem, large)
    assert.equal((await sem.holders(key, live))?.waiting, 1)
  })

  it('drops a place in line kept for max(ttl, 3 s) once its waiter stopped asking', async () => {
    const key = name('lapse')
    const sem = facet()
    await granted(sem, request(key, 2))
    const gone = request(key, 2, 2, 500)
    assert.equal((await sem.tryAcquire(gone, live)).granted, false)
    const k = redisSemaphoreKeys(key)
    const keptUntil = Number(await store.admin.zscore(k.kept, gone.owner))
    const now = await serverNow()
    assert.ok(keptUntil - now > 2_000 && keptUntil - now <= 3_000, `kept ${keptUntil - now} ms`)
    // Its time moved to the server's present: the next attempt finds the place lapsed.
    await store.admin.zadd(k.kept, now, gone.owner)
    await granted(sem, request(key, 2))
    assert.deepEqual(await store.admin.zrange(k.line, '0', '-1'), [])
  })

  it('names the first in line on the channel when a release may admit it', async () => {
    const key = name('wake')
    const sem = facet()
    const holder = request(key, 1)
    const grant = await granted(sem, holder)
    const [first, second] = [request(key, 1), request(key, 1)]
    assert.equal((await sem.tryAcquire(first, live)).granted, false)
    assert.equal((await sem.tryAcquire(second, live)).granted, false)
    const listener = store.connection()
    const heard: string[] = []
    listener.on('message', (_channel: string, message: string) => heard.push(message))
    await listener.subscribe(redisSemaphoreKeys(key).changed)
    await sem.release({ key, owner: holder.owner, fence: grant.fence, cookie: undefined }, live)
    await sem.setLimit(key, 1, live)
    await pollUntil(
      async () => heard.length,
      (n) => n >= 2,
      WITHIN,
    )
    assert.deepEqual(heard, [first.owner, first.owner], 'only the first waiter is woken, never the herd')
  })

  it('reads its grant back when the reply to an acquire that ran was lost', async () => {
    const key = name('lost-reply')
    const connection = store.connection()
    let lose = true
    // The script runs on the server; its reply is lost on the way back, as on a connection reset.
    const flaky = new Proxy(connection, {
      get(target, property) {
        const value = Reflect.get(target, property, target)
        if (property !== 'evalsha' || typeof value !== 'function') {
          return typeof value === 'function' ? value.bind(target) : value
        }
        return async (sha: string, ...rest: unknown[]) => {
          const reply = await value.call(target, sha, ...rest)
          if (sha === ACQUIRE.sha && lose) {
            lose = false
            throw new Error('Connection is closed.')
          }
          return reply
        }
      },
    })
    const backend = store.backend(flaky as Redis)
    const req = request(key, 1)
    const grant = await granted(backend.semaphore!, req)
    const k = redisSemaphoreKeys(key)
    assert.match((await store.admin.hget(k.grants, req.owner)) ?? '', new RegExp(`^1 ${grant.fence} `))
    assert.ok(grant.ttlMs > 0 && grant.ttlMs <= 20_000, `the lease left: ${grant.ttlMs} ms`)
  })
})
