/**
 * Counting semaphores, on every backend that offers them: never more than `limit` permits held under
 * contention, `permits: k` all or nothing, the stored limit (a mismatch refused, `setLimit` obeyed and
 * waking waiters), a holder that stops renewing freeing its permits after its lease, an acquire given up
 * leaving nothing behind, and the view `inspect` gives. All through the public API.
 */
import assert from 'node:assert/strict'
import { LimitMismatchError, LockLostError, LockNotAcquiredError } from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import { pollUntil } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

/** The generous bound of every wait: a liveness limit on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

export const semaphoreCases: ConformanceCase[] = [
  {
    name: 'semaphore: never more than `limit` permits held by contenders that take 1 or 2 at a time',
    async run(ctx) {
      const name = ctx.key('sem-limit')
      const limit = 3
      const clients = [0, 1, 2, 3].map(() => ctx.client({ ttl: '20s' }))
      let inside = 0
      let most = 0
      const sequences: bigint[] = []
      const worker = async (client: (typeof clients)[number], permits: number) => {
        for (let round = 0; round < 4; round++) {
          const held = await client.semaphore(name, { limit }).acquire({ permits, timeout: '60s' })
          sequences.push(held.sequence)
          inside += permits
          most = Math.max(most, inside)
          assert.ok(inside <= limit, `${inside} permits held at once, limit ${limit}`)
          await sleep(5)
          inside -= permits
          await held.release()
        }
      }
      await Promise.all(clients.map((client, i) => worker(client, i % 2 === 0 ? 1 : 2)))
      assert.ok(most >= 2, `the permits were shared (at most ${most} held at once)`)
      assert.equal(new Set(sequences).size, sequences.length, 'every grant has its own sequence')
    },
  },

  {
    name: 'semaphore: permits are taken all at once or not at all, and a waiter for several gets them together',
    async run(ctx) {
      const name = ctx.key('sem-all')
      const [a, b, c] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const two = await a.semaphore(name, { limit: 3 }).acquire({ permits: 2 })
      assert.equal(two.permits, 2)
      assert.equal(await b.semaphore(name, { limit: 3 }).tryAcquire({ permits: 2 }), null)
      // The refused request left nothing behind: the one free permit is there to take.
      const one = await c.semaphore(name, { limit: 3 }).tryAcquire()
      assert.ok(one, 'one permit was free')
      const both = awaitLater(b.semaphore(name, { limit: 3 }).acquire({ permits: 2, timeout: '60s' }))
      await sleep(ctx.ttl(1))
      await two.release()
      const granted = await both
      const view = await a.semaphore(name, { limit: 3 }).inspect()
      assert.equal(view.held, 3)
      assert.deepEqual(view.holders.map((h) => h.permits).sort(), [1, 2])
      await granted.release()
      await one.release()
      assert.equal((await a.semaphore(name, { limit: 3 }).inspect()).held, 0)
    },
  },

  {
    name: 'semaphore: a client opening it with another limit is refused; setLimit changes it and wakes waiters',
    async run(ctx) {
      const name = ctx.key('sem-limit-stored')
      const [a, b] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const held = await a.semaphore(name, { limit: 1 }).acquire()
      await assert.rejects(b.semaphore(name, { limit: 2 }).acquire({ timeout: '5s' }), (error: unknown) => {
        assert.ok(error instanceof LimitMismatchError, `expected a LimitMismatchError, got ${error}`)
        assert.equal(error.storedLimit, 1)
        assert.equal(error.requestedLimit, 2)
        assert.equal(error.key, name)
        assert.match(error.message, /limit 1, not 2/)
        return true
      })
      const waiting = awaitLater(b.semaphore(name, { limit: 1 }).acquire({ timeout: '60s' }))
      await sleep(ctx.ttl(1))
      await a.semaphore(name, { limit: 1 }).setLimit(2)
      // Woken by the new limit while the first permit is still held.
      const second = await waiting
      const view = await a.semaphore(name, { limit: 2 }).inspect()
      assert.equal(view.limit, 2)
      assert.equal(view.held, 2)
      await assert.rejects(b.semaphore(name, { limit: 1 }).tryAcquire(), LimitMismatchError)
      await second.release()
      await held.release()
    },
  },

  {
    name: 'semaphore: a holder that stops renewing frees its permits when its lease ends, and learns it',
    async run(ctx) {
      const name = ctx.key('sem-expiry')
      const lease = ctx.ttl(3)
      const [a, b] = [ctx.client({ ttl: lease, renew: false }), ctx.client({ ttl: '20s' })]
      const stale = await a.semaphore(name, { limit: 1 }).acquire()
      const next = await b.semaphore(name, { limit: 1 }).acquire({ timeout: '60s' })
      assert.ok(next.sequence > stale.sequence, `sequence ${next.sequence} after ${stale.sequence}`)
      await assert.rejects(stale.extend(), LockLostError)
      assert.ok(stale.signal.aborted)
      await next.release()
    },
  },

  {
    name: 'semaphore: an acquire given up (timeout or abort) leaves no permit and no place in line',
    async run(ctx) {
      const name = ctx.key('sem-abandon')
      const [a, b] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const held = await a.semaphore(name, { limit: 2 }).acquire({ permits: 2 })
      await assert.rejects(
        b.semaphore(name, { limit: 2 }).acquire({ timeout: ctx.ttl(1) }),
        LockNotAcquiredError,
      )
      const stop = new AbortController()
      const aborted = awaitLater(b.semaphore(name, { limit: 2 }).acquire({ signal: stop.signal }))
      await sleep(ctx.ttl(1))
      stop.abort(new Error('given up'))
      await assert.rejects(aborted, /given up/)
      await held.release()
      // Nothing left that could take or block a permit: all of them are free, to anyone. An attempt the core
      // gave up on while the store still ran it (a loaded machine) may leave a place in line that lapses
      // after max(ttl, 3 s), never longer: wait for that, then every permit must be free at once.
      const after = await pollUntil(
        () => a.semaphore(name, { limit: 2 }).inspect(),
        (view) => view.held === 0 && !view.waiting,
        WITHIN,
      )
      assert.equal(after.held, 0, 'the permits were given back')
      assert.ok(!after.waiting, `a place in line outlived its lapse (waiting: ${after.waiting})`)
      const all = await a.semaphore(name, { limit: 2 }).tryAcquire({ permits: 2 })
      assert.ok(all, 'every permit was free')
      const view = await b.semaphore(name, { limit: 2 }).inspect()
      assert.deepEqual(
        view.holders.map((h) => h.owner),
        [all.owner],
        'only the last grant holds',
      )
      assert.ok(!view.waiting, `nobody waits (waiting: ${view.waiting})`)
      await all.release()
    },
  },

  {
    name: 'semaphore: inspect shows the limit, the holders with their permits, and which are this client’s',
    async run(ctx) {
      const name = ctx.key('sem-inspect')
      const [a, b] = [ctx.client({ ttl: '20s', holder: 'worker a' }), ctx.client({ ttl: '20s' })]
      const fresh = await a.semaphore(name, { limit: 4 }).inspect()
      assert.deepEqual([fresh.limit, fresh.held, fresh.available, fresh.holders.length], [4, 0, 4, 0])
      const mine = await a.semaphore(name, { limit: 4 }).acquire({ permits: 3 })
      const view = await a.semaphore(name, { limit: 4 }).inspect()
      assert.deepEqual([view.limit, view.held, view.available], [4, 3, 1])
      const [holder] = view.holders
      assert.ok(holder)
      assert.equal(holder.owner, mine.owner)
      assert.equal(holder.permits, 3)
      assert.equal(holder.isMe, true)
      if (holder.holder !== undefined) assert.match(holder.holder, /worker a/)
      if (holder.sequence !== undefined) assert.equal(holder.sequence, mine.sequence)
      assert.ok(holder.expiresInMs === undefined || (holder.expiresInMs > 0 && holder.expiresInMs <= 20_000))
      const theirs = await b.semaphore(name, { limit: 4 }).inspect()
      assert.equal(theirs.holders[0]?.isMe, false)
      await mine.release()
      assert.equal((await b.semaphore(name, { limit: 4 }).inspect()).held, 0)
    },
  },

  {
    name: 'semaphore: bad limits and permits are refused before any I/O, naming the problem',
    async run(ctx) {
      const client = ctx.client()
      const name = ctx.key('sem-bad')
      for (const limit of [0, -1, 1.5, 10_001, Number.NaN, '2']) {
        assert.throws(() => client.semaphore(name, { limit: limit as number }), /`limit` of semaphore/)
      }
      assert.throws(() => client.semaphore(name, { limt: 2 } as never), /did you mean `limit`/)
      const sem = client.semaphore(name, { limit: 2 })
      await assert.rejects(sem.acquire({ permits: 3 }), /its limit is 2/)
      await assert.rejects(sem.acquire({ permits: 0 }), /`permits`/)
      await assert.rejects(sem.acquire({ permit: 1 } as never), /did you mean `permits`/)
    },
  },
]
