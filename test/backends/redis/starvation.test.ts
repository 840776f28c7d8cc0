/**
 * Plain Redis mode's starvation bound against a real server: a waiter refused for longer than
 * `starvationMs` marks itself starving and a free lock goes to it before the worker that keeps re-taking
 * it; a marked waiter that dies holds a free lock back no longer than its mark lives; giving up deletes
 * our own mark (only ours).
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { fromUrl, type RedisBackend, redisBackend } from '../../../src/backends/redis/index.js'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import { STARVING_MARK_MS } from '../../../src/backends/redis/mutex/plain.js'
import { Subscriptions } from '../../../src/backends/redis/subscriptions.js'
import type { AcquireRequest } from '../../../src/core/backend.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { type RedisServer, startRedis } from '../../servers/redis.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'

let server: RedisServer
let admin: Redis
const connections: Redis[] = []
const lockClients: LockClient[] = []
const key = (label: string) => `starve-${label}-${randomBytes(3).toString('hex')}`
const owner = () => randomBytes(16).toString('hex')
/** A signal that never aborts, for calling a backend directly. */
const live = new AbortController().signal

/** A plain backend on its own connection (another client of the server, as another process would be). */
function backend(starvationMs?: number): RedisBackend {
  const connection = new Redis(server.port, '127.0.0.1')
  connection.on('error', () => {})
  connections.push(connection)
  return redisBackend({ client: connection, starvationMs })
}

/** A request whose attempts count as starving: its acquire began 20 ms ago, past a 1 ms bound. */
function starvingRequest(k: string, who: string): AcquireRequest {
  return { key: k, owner: who, ttlMs: 30_000, since: performance.now() - 20 }
}

before(async () => {
  server = await startRedis()
  admin = new Redis(server.port, '127.0.0.1')
})
after(async () => {
  await Promise.all(lockClients.map((c) => c.close()))
  for (const c of connections) c.disconnect()
  admin.disconnect()
  await server.destroy()
})

describe('redis plain mode: starvation bound', () => {
  it('a waiter of another client gets the lock within the bound from a worker that re-takes it at once', async () => {
    const k = key('barging')
    const worker = backend()
    // The worker sends its next attempt right behind its release, on the same connection: the server runs
    // it before any waiter can even hear of the release, so without the bound the waiter never wins.
    // One cycle first loads the scripts: a NOSCRIPT retry would reorder the pipelined pair below.
    const warm = { key: k, owner: owner(), ttlMs: 30_000 }
    assert.ok((await worker.tryAcquire(warm, live)).granted)
    await worker.release({ key: k, owner: warm.owner, fence: 0n, cookie: undefined }, live)
    let current: AcquireRequest = { key: k, owner: owner(), ttlMs: 30_000 }
    assert.ok((await worker.tryAcquire(current, live)).granted)
    let stop = false
    let grants = 0
    const loop = (async () => {
      while (!stop) {
        await sleep(5)
        const next = { key: k, owner: owner(), ttlMs: 30_000 }
        const released = awaitLater(
          worker.release({ key: k, owner: current.owner, fence: 0n, cookie: undefined }, live),
        )
        let result = await worker.tryAcquire(next, live)
        await released
        while (!result.granted && !stop) {
          await sleep(5)
          result = await worker.tryAcquire(next, live)
        }
        if (!result.granted) return
        current = next
        grants++
      }
      await worker.release({ key: k, owner: current.owner, fence: 0n, cookie: undefined }, live)
    })()
    loop.catch(() => {})
    const waiters = createLockClient(backend(1000), { ttl: '30s' })
    lockClients.push(waiters)
    const start = performance.now()
    const waited = waiters.acquire(k, { timeout: '12s' }).then(
      async (lock) => {
        const ms = performance.now() - start
        const grantsBefore = grants
        const mark = await admin.exists(redisLockKeys(k).starving)
        await sleep(50)
        await lock.release()
        return { ms, grantsBefore, mark }
      },
      (error: unknown) => ({ error }),
    )
    const outcome = await waited
    stop = true
    await loop
    assert.ok(!('error' in outcome), `the waiter starved: ${'error' in outcome ? outcome.error : ''}`)
    // The bound is 1 s, and the worker's lease is never shorter than 30 s: only the bound let it in.
    assert.ok(outcome.ms < 8000, `the waiter got the lock after ${Math.round(outcome.ms)} ms`)
    assert.ok(outcome.grantsBefore > 0, 'the worker never re-took the lock: nothing was tested')
    assert.equal(outcome.mark, 0, "the starving waiter's grant deletes its mark")
  })

  it('a marked waiter that died holds a free lock back no longer than its mark lives', async () => {
    const k = key('ghost')
    const b = backend(1)
    const holder = { key: k, owner: owner(), ttlMs: 30_000 }
    assert.ok((await b.tryAcquire(holder, live)).granted)
    const ghost = starvingRequest(k, 'ghost')
    const refused = await b.tryAcquire(ghost, live)
    assert.ok(!refused.granted)
    const { starving } = redisLockKeys(k)
    assert.equal(await admin.get(starving), 'ghost')
    const pttl = await admin.pttl(starving)
    assert.ok(pttl > 0 && pttl <= STARVING_MARK_MS, `the mark lives ${pttl} ms`)
    assert.ok(
      !refused.granted && refused.retryInMs! <= STARVING_MARK_MS / 3,
      'the marked waiter asks again soon',
    )
    // The ghost never asks again. The lock is released: another owner is refused while the mark lives…
    await b.release({ key: k, owner: holder.owner, fence: 0n, cookie: undefined }, live)
    const other = await backend().tryAcquire({ key: k, owner: owner(), ttlMs: 30_000 }, live)
    assert.ok(!other.granted, 'a free lock marked for another waiter went to someone else')
    assert.ok(
      other.retryInMs! > 0 && other.retryInMs! <= STARVING_MARK_MS,
      `told to wait ${other.retryInMs} ms`,
    )
    // …and gets it once the mark expired (generous: a loaded machine).
    const start = performance.now()
    const locks = createLockClient(backend(), { ttl: '30s' })
    lockClients.push(locks)
    const lock = await locks.acquire(k, { timeout: '10s' })
    const ms = performance.now() - start
    await lock.release()
    assert.ok(ms < STARVING_MARK_MS + 4000, `blocked for ${Math.round(ms)} ms by a dead waiter's mark`)
  })

  it('a URL sets the bound with starvation=, and starvation=0 turns it off', async () => {
    const marks: Record<string, string | null> = {}
    for (const param of ['starvation=0', 'starvation=1ms']) {
      const k = key('url')
      const b = await fromUrl(new URL(`${server.url}?${param}`))
      try {
        const holder = { key: k, owner: owner(), ttlMs: 30_000 }
        assert.ok((await b.tryAcquire(holder, live)).granted)
        const waiter = starvingRequest(k, `waiter-${param}`)
        assert.ok(!(await b.tryAcquire(waiter, live)).granted)
        marks[param] = await admin.get(redisLockKeys(k).starving)
        await b.release({ key: k, owner: holder.owner, fence: 0n, cookie: undefined }, live)
      } finally {
        await b.close()
      }
    }
    assert.deepEqual(marks, { 'starvation=0': null, 'starvation=1ms': 'waiter-starvation=1ms' })
  })

  it('giving up deletes our own mark, never another waiter’s, and wakes the next waiter', async () => {
    const k = key('abandon')
    const b = backend(1)
    const holder = { key: k, owner: owner(), ttlMs: 30_000 }
    assert.ok((await b.tryAcquire(holder, live)).granted)
    const marked = starvingRequest(k, 'marked')
    await b.tryAcquire(marked, live)
    const { starving } = redisLockKeys(k)
    assert.equal(await admin.get(starving), 'marked')
    // Another waiter giving up leaves the mark.
    await b.abandon({ key: k, owner: 'someone-else', ttlMs: 30_000 }, live)
    assert.equal(await admin.get(starving), 'marked')
    await b.release({ key: k, owner: holder.owner, fence: 0n, cookie: undefined }, live)
    // A waiter of another client hears the marked waiter give up and takes the free lock.
    const locks = createLockClient(backend(), { ttl: '30s' })
    lockClients.push(locks)
    const start = performance.now()
    const waiting = locks.acquire(k, { timeout: '10s' })
    waiting.catch(() => {})
    await sleep(100)
    await b.abandon(marked, live)
    assert.equal(await admin.exists(starving), 0)
    const lock = await waiting
    await lock.release()
    assert.ok(performance.now() - start < 10_000)
  })
})

describe('redis plain mode: waking the starving waiter', () => {
  it('a release naming the marked waiter wakes that waiter alone, not the oldest of its client', async () => {
    const connection = new Redis(server.port, '127.0.0.1')
    connection.on('error', () => {})
    connections.push(connection)
    // The subscriber connection it opens joins `connections`, closed after the tests.
    const subscriptions = new Subscriptions(connection, connections)
    const channel = `${key('wake')}:released`
    const woken: string[] = []
    const stop = new AbortController()
    const wait = (self: string) =>
      subscriptions.wait(channel, undefined, stop.signal, self).then((message) => {
        woken.push(`${self}:${message}`)
      })
    // The first waits only wake on the subscription's confirmation: wait again once it is in place.
    await Promise.all([wait('oldest'), wait('marked')])
    woken.length = 0
    const oldest = wait('oldest')
    const marked = wait('marked')
    await admin.publish(channel, '>marked')
    await Promise.race([marked, sleep(5000)])
    assert.deepEqual(woken, ['marked:>marked'])
    stop.abort()
    await Promise.all([oldest, marked])
    await subscriptions.close()
  })
})
