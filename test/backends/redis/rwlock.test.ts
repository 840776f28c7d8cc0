/**
 * The Redis read-write lock against a real server, for what the conformance cases cannot see: its keys on
 * the store (one hash tag, apart from a lock of the same name), leases ended by the server's clock, a line
 * kept in arrival order even when the clock steps back, downgrade in place, the waiters named on the
 * channel (the front only), fences after the keys were deleted, the read-back after a lost reply, and no
 * key left once the lock is idle or its holders died.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { describe, it } from 'node:test'
import type { Redis } from 'ioredis'
import { slotOf } from '../../../src/backends/redis/keys.js'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import { redisRwLockKeys } from '../../../src/backends/redis/rwlock/layout.js'
import { ACQUIRE } from '../../../src/backends/redis/rwlock/scripts.js'
import type { AcquireRequest, Grant, HeldLease, RwLockFacet, RwLockMode } from '../../../src/core/backend.js'
import { pollUntil } from '../../support/wait.js'
import { redisTestServer } from './fixture.js'

const store = redisTestServer()
const name = (label: string) => `rw-${label}-${randomBytes(3).toString('hex')}`
const owner = () => randomBytes(16).toString('hex')
/** A signal that never aborts, for calling a facet directly. */
const live = new AbortController().signal
/** The bound of every wait: liveness on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

const facet = (): RwLockFacet => store.backend().rwlock!
const request = (key: string, mode: RwLockMode, ttlMs = 20_000): AcquireRequest => ({
  key,
  owner: owner(),
  ttlMs,
  rwlock: { mode },
})
async function granted(rw: RwLockFacet, req: AcquireRequest): Promise<Grant> {
  const result = await rw.tryAcquire(req, live)
  assert.ok(result.granted, `${req.rwlock?.mode} ${req.owner} was granted`)
  return result
}
async function refused(rw: RwLockFacet, req: AcquireRequest): Promise<void> {
  const result = await rw.tryAcquire(req, live)
  assert.equal(result.granted, false, `${req.rwlock?.mode} ${req.owner} was refused`)
}
const leaseOf = (req: AcquireRequest, grant: Grant): HeldLease => ({
  key: req.key,
  owner: req.owner,
  fence: grant.fence,
  cookie: undefined,
})
/** The server's clock in ms. */
async function serverNow(): Promise<number> {
  const [s, us] = await store.admin.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
}
const stateKeys = (key: string) => {
  const k = redisRwLockKeys(key)
  return [k.line, k.writers, k.ends, k.grants, k.epoch]
}

describe('redis rwlock: storage', () => {
  it('keeps its keys under one hash tag, apart from a lock of the same name', async () => {
    const key = name('layout')
    const locks = store.client({ ttl: '20s', holder: 'worker a' })
    const w = await locks.rwlock(key).write()
    const k = redisRwLockKeys(key)
    assert.ok(k.line.startsWith(`fencelock:!rwlock{${key}}`))
    assert.equal(new Set([...stateKeys(key), k.fence, k.changed].map(slotOf)).size, 1, 'one Cluster slot')
    assert.deepEqual(await store.admin.zrange(k.line, '0', '-1'), [w.owner])
    assert.deepEqual(await store.admin.zrange(k.writers, '0', '-1'), [w.owner])
    assert.match((await store.admin.hget(k.grants, w.owner)) ?? '', new RegExp(`^${w.fence} .*worker a`))
    assert.equal(await store.admin.get(k.fence), String(w.fence))
    const lock = await locks.tryAcquire(key)
    assert.ok(lock, 'the lock of the same name is free')
    assert.equal(await store.admin.exists(redisLockKeys(key).lock), 1)
    const listed: string[] = []
    for await (const l of locks.list()) listed.push(l.key)
    assert.deepEqual(listed, [key], '`list` shows the lock, not the read-write lock')
    await lock.release()
    await w.release()
  })

  it('keeps nothing but the fence key once nobody holds or waits', async () => {
    const key = name('idle')
    const rw = facet()
    const writer = request(key, 'write')
    const grant = await granted(rw, writer)
    const reader = request(key, 'read')
    await refused(rw, reader)
    assert.ok((await store.admin.exists(...stateKeys(key))) >= 3, 'the line, writers, ends and grants exist')
    await rw.abandon(reader, live)
    assert.equal(await rw.release(leaseOf(writer, grant), live), true)
    assert.equal(await store.admin.exists(...stateKeys(key)), 0, 'every state key deleted')
    assert.equal(await store.admin.exists(redisRwLockKeys(key).fence), 1, 'the fence key stays')
  })

  it('leaves no state once the leases of holders that died have ended', async () => {
    const key = name('died')
    const rw = facet()
    await granted(rw, request(key, 'read', 1500))
    await granted(rw, request(key, 'read', 1000))
    const k = redisRwLockKeys(key)
    const ttl = await store.admin.pttl(k.line)
    assert.ok(ttl > 0 && ttl <= 1500, `the keys expire with the last lease (PTTL ${ttl})`)
    // Nobody calls again: the server's own expiry removes them.
    await pollUntil(
      () => store.admin.exists(...stateKeys(key)),
      (n) => n === 0,
      WITHIN,
    )
  })
})

describe('redis rwlock: the server decides', () => {
  it('ends a lease by the server clock', async () => {
    const key = name('clock')
    const rw = facet()
    const reader = request(key, 'read')
    await granted(rw, reader)
    const k = redisRwLockKeys(key)
    const ends = Number(await store.admin.zscore(k.ends, reader.owner))
    const now = await serverNow()
    assert.ok(Math.abs(ends - (now + 20_000)) < 5_000, `lease ends at ${ends}, server now ${now}`)
    const writer = request(key, 'write')
    await refused(rw, writer)
    // Its end moved to the server's present: the next attempt finds it ended, with no release.
    await store.admin.zadd(k.ends, await serverNow(), reader.owner)
    await granted(rw, writer)
    assert.deepEqual(await store.admin.zrange(k.line, '0', '-1'), [writer.owner])
    assert.equal(await store.admin.hexists(k.grants, reader.owner), 0, 'the ended lease is purged')
  })

  it('puts a new arrival behind the whole line, even when the clock stepped back', async () => {
    const key = name('arrival')
    const rw = facet()
    const reader = request(key, 'read')
    await granted(rw, reader)
    // The reader arrived an hour "later" than the clock now says (the clock was set back since).
    const k = redisRwLockKeys(key)
    const [s] = await store.admin.time()
    await store.admin.zadd(k.line, String((Number(s) + 3600) * 1_000_000), reader.owner)
    const writer = request(key, 'write')
    await refused(rw, writer)
    const [first, last] = await store.admin.zrange(k.line, '0', '-1')
    assert.deepEqual([first, last], [reader.owner, writer.owner], 'the writer queued behind the reader')
  })

  it('downgrades a writer in place: its place, its fence, readers behind it admitted, a writer not', async () => {
    const key = name('downgrade')
    const rw = facet()
    const writer = request(key, 'write')
    const grant = await granted(rw, writer)
    const [reader, nextWriter, lateReader] = [
      request(key, 'read'),
      request(key, 'write'),
      request(key, 'read'),
    ]
    await refused(rw, reader)
    await refused(rw, nextWriter)
    await refused(rw, lateReader)
    const k = redisRwLockKeys(key)
    const place = await store.admin.zscore(k.line, writer.owner)
    assert.deepEqual(await rw.downgrade(leaseOf(writer, grant), live), { downgraded: true })
    assert.equal(await store.admin.zscore(k.line, writer.owner), place, 'the same place in line')
    assert.deepEqual(await store.admin.zrange(k.writers, '0', '-1'), [nextWriter.owner])
    assert.deepEqual(await rw.downgrade(leaseOf(writer, grant), live), { downgraded: true }, 'again: no-op')
    const joined = await granted(rw, reader)
    assert.ok(
      joined.fence > grant.fence,
      `a reader after the downgrade: epoch ${joined.fence} > ${grant.fence}`,
    )
    await refused(rw, nextWriter)
    await refused(rw, lateReader)
    const info = await rw.holders(key, live)
    assert.deepEqual(
      info?.holders.map((h) => [h.owner, h.mode, h.fence]),
      [
        [writer.owner, 'read', grant.fence],
        [reader.owner, 'read', joined.fence],
      ],
    )
    assert.equal(info?.waiting, 2)
  })

  it('names on the channel only the waiters that may now be granted', async () => {
    const key = name('wake')
    const rw = facet()
    const writer = request(key, 'write')
    const grant = await granted(rw, writer)
    const [r1, r2, w2, r3] = [
      request(key, 'read'),
      request(key, 'read'),
      request(key, 'write'),
      request(key, 'read'),
    ]
    for (const req of [r1, r2, w2, r3]) await refused(rw, req)
    const listener = store.connection()
    const heard: string[] = []
    listener.on('message', (_channel: string, message: string) => heard.push(message))
    await listener.subscribe(redisRwLockKeys(key).changed)
    await rw.release(leaseOf(writer, grant), live)
    await pollUntil(
      async () => heard.length,
      (n) => n >= 2,
      WITHIN,
    )
    assert.deepEqual(
      heard.sort(),
      [r1.owner, r2.owner].sort(),
      'the readers ahead of the next writer, no one else',
    )
    const g1 = await granted(rw, r1)
    const g2 = await granted(rw, r2)
    heard.length = 0
    await rw.release(leaseOf(r1, g1), live)
    // A reader still holds: the writer first in line cannot be granted, so nobody is named.
    await rw.release(leaseOf(r2, g2), live)
    await pollUntil(
      async () => heard.length,
      (n) => n >= 1,
      WITHIN,
    )
    assert.deepEqual(heard, [w2.owner], 'the writer alone, once the last reader left')
  })

  it('keeps fences rising after every key of the lock was deleted', async () => {
    const key = name('fences')
    const rw = facet()
    const writer = request(key, 'write')
    const w = await granted(rw, writer)
    const reader = request(key, 'read')
    await refused(rw, reader)
    const k = redisRwLockKeys(key)
    await store.admin.del(...stateKeys(key), k.fence)
    // Everything forgotten (an operator, a restart without persistence): the clock is the floor.
    const r = await granted(rw, request(key, 'read'))
    assert.ok(r.fence > w.fence, `reader ${r.fence} above the forgotten writer ${w.fence}`)
    await store.admin.del(...stateKeys(key), k.fence)
    const w2 = await granted(rw, request(key, 'write'))
    assert.ok(w2.fence > r.fence, `writer ${w2.fence} above the forgotten reader ${r.fence}`)
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
    const req = request(key, 'write')
    const grant = await granted(backend.rwlock!, req)
    const k = redisRwLockKeys(key)
    assert.match((await store.admin.hget(k.grants, req.owner)) ?? '', new RegExp(`^${grant.fence} `))
    assert.ok(grant.ttlMs > 0 && grant.ttlMs <= 20_000, `the lease left: ${grant.ttlMs} ms`)
    // A retried attempt of the same acquire finds itself granted, with the same fence.
    const again = await granted(backend.rwlock!, req)
    assert.equal(again.fence, grant.fence)
  })
})
