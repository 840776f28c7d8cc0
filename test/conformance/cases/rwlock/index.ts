/**
 * Read-write locks, on every backend that offers them: readers share and a writer excludes everyone, one
 * line in arrival order (a reader arriving after a waiting writer waits behind it), downgrade in place,
 * the fence rules (a writer's above every earlier grant, a reader's between the writers around it), a
 * holder that stops renewing freeing the lock after its lease, an acquire given up leaving no place in
 * line, and the view `inspect` gives. All through the public API.
 */
import assert from 'node:assert/strict'
import { type LockClient, LockLostError, LockNotAcquiredError } from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import { pollUntil } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

/** The generous bound of every wait: a liveness limit on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

/** Resolves once `client` sees `count` acquires waiting in `name`'s line. */
const waitersOf = (client: LockClient, name: string, count: number) =>
  pollUntil(
    () => client.rwlock(name).inspect(),
    (view) => view.waiting >= count,
    WITHIN,
  )

export const rwlockCases: ConformanceCase[] = [
  {
    name: 'rwlock: readers share the lock; a writer holds it alone',
    async run(ctx) {
      const name = ctx.key('rw-share')
      const [a, b, c] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const r1 = await a.rwlock(name).read({ timeout: '30s' })
      const r2 = await b.rwlock(name).tryRead()
      assert.ok(r2, 'a second reader shares the lock')
      assert.equal(r1.mode, 'read')
      assert.equal(await c.rwlock(name).tryWrite(), null, 'no writer while readers hold')
      await r1.release()
      assert.equal(await c.rwlock(name).tryWrite(), null, 'no writer while one reader holds')
      await r2.release()
      const w = await c.rwlock(name).tryWrite()
      assert.ok(w, 'the writer is granted once every reader left')
      assert.equal(w.mode, 'write')
      assert.equal(await a.rwlock(name).tryRead(), null, 'no reader while the writer holds')
      assert.equal(await b.rwlock(name).tryWrite(), null, 'no second writer')
      await w.release()
      const again = await a.rwlock(name).tryRead()
      assert.ok(again, 'free again after the writer')
      await again.release()
    },
  },

  {
    name: 'rwlock: a reader arriving after a waiting writer waits behind it (no barging, no starvation)',
    async run(ctx) {
      const name = ctx.key('rw-fair')
      const [a, b, c] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const first = await a.rwlock(name).read()
      const writing = awaitLater(b.rwlock(name).write({ timeout: '60s' }))
      await waitersOf(a, name, 1)
      // The lock is held shared, yet a new reader may not pass the writer in line.
      assert.equal(await c.rwlock(name).tryRead(), null, 'a later reader passed a queued writer')
      await assert.rejects(c.rwlock(name).read({ timeout: ctx.ttl(1) }), LockNotAcquiredError)
      const reading = awaitLater(c.rwlock(name).read({ timeout: '60s' }))
      await waitersOf(a, name, 2)
      await first.release()
      const w = await writing
      assert.ok(w.fence > first.fence, `writer fence ${w.fence} above the earlier reader's ${first.fence}`)
      const view = await a.rwlock(name).inspect()
      assert.deepEqual(
        view.holders.map((h) => [h.owner, h.mode]),
        [[w.owner, 'write']],
        'the reader behind the writer still waits',
      )
      await w.release()
      const r = await reading
      assert.ok(r.fence > w.fence, `reader fence ${r.fence} above the writer's ${w.fence}`)
      await r.release()
    },
  },

  {
    name: 'rwlock: downgrade keeps the writer’s place: readers join it, a queued writer still waits',
    async run(ctx) {
      const name = ctx.key('rw-downgrade')
      const [a, b, c] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const w = await a.rwlock(name).write()
      // Before anyone waits: a downgraded writer lets readers in.
      const r = await w.downgrade()
      assert.equal(r.mode, 'read')
      assert.equal(r.fence, w.fence, 'the read lease keeps the grant’s fence')
      assert.equal(r.owner, w.owner, 'the same entry')
      assert.equal(await w.downgrade(), r, 'downgrading again gives the same read lease')
      await w.release() // Holds nothing any more: the read lease stays.
      const joined = await b.rwlock(name).tryRead()
      assert.ok(joined, 'a reader joins a downgraded writer')
      await joined.release()
      assert.equal((await c.rwlock(name).inspect()).holders.length, 1, 'the read lease outlived w.release()')
      await r.release()

      // With a writer queued behind it: the downgrade lets nobody in between, and later readers wait too.
      const w1 = await a.rwlock(name).write()
      const queued = awaitLater(b.rwlock(name).write({ timeout: '60s' }))
      await waitersOf(c, name, 1)
      const r1 = await w1.downgrade()
      await sleep(ctx.ttl(1))
      const view = await c.rwlock(name).inspect()
      assert.deepEqual(
        view.holders.map((h) => [h.owner, h.mode]),
        [[w1.owner, 'read']],
        'the queued writer did not get in',
      )
      assert.equal(await c.rwlock(name).tryRead(), null, 'a later reader waits behind the queued writer')
      await r1.release()
      const w2 = await queued
      assert.ok(w2.fence > r1.fence, `the queued writer's fence ${w2.fence} above ${r1.fence}`)
      await w2.release()
    },
  },

  {
    name: 'rwlock: fences: a writer’s above every earlier grant, a reader’s above earlier writers’ and below later ones',
    async run(ctx) {
      const name = ctx.key('rw-fence')
      const [a, b] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const r1 = await a.rwlock(name).read()
      const r2 = await b.rwlock(name).read()
      const later = awaitLater(a.rwlock(name).write({ timeout: '60s' }))
      await waitersOf(b, name, 1)
      await r1.release()
      await r2.release()
      const w1 = await later
      assert.ok(
        w1.fence > r1.fence && w1.fence > r2.fence,
        `writer ${w1.fence} above readers ${r1.fence}, ${r2.fence}`,
      )
      await w1.release()
      const r3 = await b.rwlock(name).read()
      const r4 = await a.rwlock(name).read()
      assert.ok(
        r3.fence > w1.fence && r4.fence > w1.fence,
        `readers ${r3.fence}, ${r4.fence} above ${w1.fence}`,
      )
      await r3.release()
      await r4.release()
      const w2 = await a.rwlock(name).write()
      assert.ok(
        w2.fence > r3.fence && w2.fence > r4.fence,
        `writer ${w2.fence} above readers ${r3.fence}, ${r4.fence}`,
      )
      await w2.release()
      const info = await a.rwlock(name).inspect()
      assert.ok(info.fence === undefined || info.fence >= w2.fence, `inspect's fence ${info.fence}`)
    },
  },

  {
    name: 'rwlock: a reader or writer that stops renewing frees the lock when its lease ends, and learns it',
    async run(ctx) {
      const name = ctx.key('rw-expiry')
      const lease = ctx.ttl(3)
      const [a, b] = [ctx.client({ ttl: lease, renew: false }), ctx.client({ ttl: '20s' })]
      const staleReader = await a.rwlock(name).read()
      const w = await b.rwlock(name).write({ timeout: '60s' })
      assert.ok(w.fence > staleReader.fence)
      await assert.rejects(staleReader.extend(), LockLostError)
      assert.ok(staleReader.signal.aborted)
      await w.release()
      const staleWriter = await a.rwlock(name).write()
      const r = await b.rwlock(name).read({ timeout: '60s' })
      assert.ok(r.fence > staleWriter.fence)
      await assert.rejects(staleWriter.extend(), LockLostError)
      await r.release()
    },
  },

  {
    name: 'rwlock: an acquire given up (timeout or abort) leaves no place in line',
    async run(ctx) {
      const name = ctx.key('rw-abandon')
      const [a, b] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const held = await a.rwlock(name).write()
      await assert.rejects(b.rwlock(name).write({ timeout: ctx.ttl(1) }), LockNotAcquiredError)
      const stop = new AbortController()
      const aborted = awaitLater(b.rwlock(name).read({ signal: stop.signal }))
      await sleep(ctx.ttl(1))
      stop.abort(new Error('given up'))
      await assert.rejects(aborted, /given up/)
      await held.release()
      // An attempt the core gave up on while the store still ran it (a loaded machine) may leave a place
      // that lapses after max(ttl, 3 s), never longer: wait for that, then the lock must be free to anyone.
      const after = await pollUntil(
        () => a.rwlock(name).inspect(),
        (view) => view.holders.length === 0 && view.waiting === 0,
        WITHIN,
      )
      assert.equal(after.waiting, 0, 'a place in line outlived its lapse')
      const w = await a.rwlock(name).tryWrite()
      assert.ok(w, 'nobody is ahead of a new writer')
      await w.release()
    },
  },

  {
    name: 'rwlock: inspect shows holders with their modes; withRead and withWrite release afterwards',
    async run(ctx) {
      const name = ctx.key('rw-inspect')
      const [a, b] = [ctx.client({ ttl: '20s', holder: 'worker a' }), ctx.client({ ttl: '20s' })]
      assert.deepEqual((await a.rwlock(name).inspect()).holders, [])
      const inside = await a.rwlock(name).withRead(async (r) => {
        const view = await a.rwlock(name).inspect()
        const [holder] = view.holders
        assert.ok(holder)
        assert.deepEqual([holder.owner, holder.mode, holder.isMe], [r.owner, 'read', true])
        if (holder.holder !== undefined) assert.match(holder.holder, /worker a/)
        if (holder.fence !== undefined) assert.equal(holder.fence, r.fence)
        assert.equal((await b.rwlock(name).inspect()).holders[0]?.isMe, false)
        return 'read'
      })
      assert.equal(inside, 'read')
      await b.rwlock(name).withWrite(async (w) => {
        assert.equal((await a.rwlock(name).inspect()).holders[0]?.mode, 'write')
        await w.downgrade()
      })
      // withWrite released the lease, downgraded or not.
      const view = await a.rwlock(name).inspect()
      assert.deepEqual([view.holders.length, view.waiting], [0, 0])
    },
  },
]
