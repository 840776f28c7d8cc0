import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { AcquireRequest, Grant } from '../../../src/core/backend.js'
import type { OwnEntry } from '../../../src/engines/queue/adapter.js'
import { type Acquisition, QueueLock } from '../../../src/engines/queue/engine.js'
import { firstN, type GrantRule, permitsRule } from '../../../src/engines/queue/grants.js'
import { awaitLater } from '../../support/later.js'
import { abortedWithin } from '../../support/wait.js'
import { deferred, type FakeEntry, FakeQueueStore, settle } from './fake-store.js'

/**
 * The queue-lock engine against the in-memory store: FIFO order, one wake-up per release, a re-check
 * after every wake-up, lost replies, abandon racing a write, and loss through the session.
 */

const open = () => new AbortController().signal
const request = (owner: string, key = 'jobs'): AcquireRequest => ({ key, owner, ttlMs: 3000 })

/**
 * `recheckMs`: how long a waiter goes without reading the line itself (the engine's default otherwise);
 * `grants`: who is granted (the engine's default, the mutex's, otherwise).
 */
function setup(recheckMs?: number, grants?: GrantRule) {
  const store = new FakeQueueStore()
  const engine = new QueueLock(store, store, {
    grants,
    recheckMs: recheckMs === undefined ? undefined : () => recheckMs,
  })
  /** One attempt; a grant is returned, a refusal is null. */
  const attempt = async (req: AcquireRequest) => {
    const result = await engine.attempt(req, open())
    return result.granted ? result : null
  }
  const release = (grant: Grant) => engine.release(grant.cookie as Acquisition<number>, open())
  const nameOf = (owner: string, key = 'jobs') =>
    store.queue(`${key}/`).find((e) => e.name.endsWith(`-${owner}`))!.name
  return { store, engine, attempt, release, nameOf }
}

/** Whether `promise` has settled by now (after the store's pending replies ran). */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false
  promise.then(
    () => {
      done = true
    },
    () => {
      done = true
    },
  )
  for (let i = 0; i < 10; i++) await settle()
  return done
}

/**
 * Awaits `promise` for up to 5 s with the process kept alive meanwhile: the engine's retry timers do not
 * keep it alive (a real store's sockets do).
 */
async function alive<T>(promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('not settled within 5 s')), 5000)
  })
  try {
    return await Promise.race([promise, late])
  } finally {
    clearTimeout(timer)
  }
}

describe('queue-lock engine', { timeout: 10_000 }, () => {
  it('grants in creation order: each release hands the lock to the next in line', async () => {
    const { engine, attempt, release } = setup()
    const a = await attempt(request('a'))
    assert.ok(a, 'the first in line is granted at once')
    const waiters = ['b', 'c', 'd'].map((owner) => request(owner))
    for (const req of waiters) assert.equal(await attempt(req), null, `${req.owner} waits behind a`)
    const waits = waiters.map((req) => engine.wait(req, open()))
    let holder = a
    const order: string[] = []
    for (const wait of waits) {
      await release(holder)
      const next = await wait
      assert.ok(next, 'the next in line is handed the lock')
      order.push((next.cookie as Acquisition<number>).owner)
      assert.ok(next.fence > holder.fence, 'fences grow with the queue')
      holder = next
    }
    assert.deepEqual(order, ['b', 'c', 'd'])
  })

  it('the engine grants by its rule, from the line the adapter read: with firstN(2) two hold at once', async () => {
    const { store, engine, attempt, release, nameOf } = setup(undefined, firstN(2))
    const a = await attempt(request('a'))
    const b = await attempt(request('b'))
    assert.ok(a && b, 'the first two in line hold at once')
    const c = request('c')
    assert.equal(await attempt(c), null, 'the third waits')
    const wait = awaitLater(engine.wait(c, open()))
    assert.equal(await settled(wait), false, 'c waits')
    // Curator's semaphore order: a waiter watches the n-th entry ahead of its own (a), not b.
    assert.equal(store.count('watch', nameOf('a')), 1, 'c watches a')
    assert.equal(store.count('watch', nameOf('b')), 0, 'c does not watch b')
    await release(a)
    const granted = await wait
    assert.ok(granted, 'c is granted once a is gone: b alone is ahead of it')
    assert.equal((granted.cookie as Acquisition<number>).owner, 'c')
    await release(b)
    await release(granted)
  })

  it("a request's own rule decides, from the counts its adapter read; a grant is told to the adapter", async () => {
    /** A counting line of limit 3: each owner's permits, the limit and the admissions, as a semaphore's. */
    class CountingStore extends FakeQueueStore {
      readonly permits = new Map([
        ['a', 2],
        ['b', 1],
        ['c', 1],
      ])
      readonly admissions: string[] = []
      #counted(ahead: readonly FakeEntry[]) {
        const permits = ahead.map((e) => this.permits.get(e.name.slice(e.name.lastIndexOf('-') + 1)) ?? 1)
        return { permits, limit: 3, line: ahead[0]! }
      }
      override async enqueue(queue: string, name: string, value: string, lease: number, looksBack: number) {
        const put = await super.enqueue(queue, name, value, lease, looksBack)
        return put.ahead ? { ...put, counted: this.#counted(put.ahead) } : put
      }
      override async check(entry: OwnEntry, looksBack: number, after?: bigint) {
        const state = await super.check(entry, looksBack, after)
        return state === 'behind' ? state : { ...state, counted: this.#counted(state.ahead) }
      }
      admitted(entry: OwnEntry) {
        this.admissions.push(entry.name)
      }
    }
    const store = new CountingStore()
    const asked: string[] = []
    const engine = new QueueLock(store, store, {
      grants: (req) => {
        asked.push(req.owner)
        return permitsRule(store.permits.get(req.owner)!)
      },
    })
    const attempt = async (req: AcquireRequest) => {
      const result = await engine.attempt(req, open())
      return result.granted ? result : null
    }
    const a = await attempt(request('a'))
    const b = await attempt(request('b'))
    assert.ok(a && b, 'a (2 permits) and b (1) fit under 3')
    assert.equal(await attempt(request('c')), null, 'c (1) does not fit behind 3 permits held')
    assert.deepEqual(asked, ['a', 'b', 'c'], "each attempt asks for its request's rule")
    await engine.release(a.cookie as Acquisition<number>, open())
    const c = await attempt(request('c'))
    assert.ok(c, 'c fits once a is gone')
    assert.equal(store.admissions.length, 3, 'each grant is told to the adapter once')
    await engine.release(b.cookie as Acquisition<number>, open())
    await engine.release(c.cookie as Acquisition<number>, open())
    await engine.close()
  })

  it('a release wakes only the next waiter: the others watch their own predecessor and do not re-read', async () => {
    const { store, engine, attempt, release, nameOf } = setup()
    const a = (await attempt(request('a')))!
    const [b, c, d] = ['b', 'c', 'd'].map((owner) => request(owner))
    for (const req of [b!, c!, d!]) await attempt(req)
    const waits = [b!, c!, d!].map((req) => awaitLater(engine.wait(req, open())))
    await settle()
    for (let i = 0; i < 10; i++) await settle()
    // Each waiter watches the entry just before its own, and nothing else.
    assert.equal(store.count('watch', nameOf('a')), 1)
    assert.equal(store.count('watch', nameOf('b')), 1)
    assert.equal(store.count('watch', nameOf('c')), 1)
    assert.equal(store.count('watch', nameOf('d')), 0)
    const checksBefore = { c: store.count('check', nameOf('c')), d: store.count('check', nameOf('d')) }
    await release(a)
    assert.ok(await waits[0], 'b is granted')
    assert.equal(await settled(waits[1]!), false, 'c still waits')
    assert.equal(await settled(waits[2]!), false, 'd still waits')
    assert.equal(store.count('check', nameOf('c')), checksBefore.c, 'c was not woken')
    assert.equal(store.count('check', nameOf('d')), checksBefore.d, 'd was not woken')
  })

  it("a wait watches the entry before ours that the enqueue read, and the core's re-attempt learns from its read", async () => {
    const { store, engine, attempt, nameOf } = setup()
    await attempt(request('a'))
    const b = request('b')
    assert.equal(await attempt(b), null, 'b waits behind a')
    // As the core does: arm the wait, then attempt again at once (the holder may have left in between).
    const wait = awaitLater(engine.wait(b, open()))
    assert.equal(await attempt(b), null, 'still behind a')
    assert.equal(await settled(wait), false, 'b waits')
    assert.equal(store.count('watch', nameOf('a')), 1, 'b watches a')
    // The enqueue read a as the entry before b; the read after the watch found it there, and answered
    // the re-attempt: no read of the queue at all.
    assert.equal(store.count('check', nameOf('b')), 0, 'no queue read besides the enqueue and the watch')
  })

  it("an idle waiter reads the line once per recheck interval; the core's polls in between send nothing", async () => {
    const { store, engine, attempt, nameOf } = setup(300)
    await attempt(request('a'))
    const b = request('b')
    await attempt(b)
    const wait = awaitLater(engine.wait(b, open()))
    await settled(wait)
    // The core's polls, every 50 ms for a second: each answered by the wait's latest read.
    const started = performance.now()
    while (performance.now() - started < 1000) {
      assert.equal(await attempt(b), null)
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
    assert.equal(store.count('check', nameOf('b')), 0, 'no poll read the line')
    // The read after the watch, then one every 225-300 ms of the wait's own (a loaded machine fires late).
    const reads = store.count('exists', nameOf('a'))
    assert.ok(reads >= 2 && reads <= 6, `${reads} reads of the entry before ours in a second`)
    assert.equal(store.count('watch', nameOf('a')), 1, 'one watch, kept')
  })

  it('a deletion the watch never reports is found by the waiter’s own read within its recheck interval', async () => {
    const { store, engine, attempt, release, nameOf } = setup(300)
    const a = (await attempt(request('a')))!
    const b = request('b')
    await attempt(b)
    // A watch that went silent: in place, but it never tells of the deletion.
    store.watch = async () => ({ gone: new Promise<never>(() => {}), cancel: () => {} })
    const wait = engine.wait(b, open())
    await settled(wait)
    await release(a)
    const grant = await alive(wait)
    assert.ok(grant, 'b is granted by its own read, without any attempt of the core')
    assert.equal(store.queue('jobs/')[0]?.name, nameOf('b'))
  })

  it('a watch that is never set up does not hold up the attempts: they read the store themselves', async () => {
    const { store, engine, attempt, release, nameOf } = setup()
    const a = (await attempt(request('a')))!
    const b = request('b')
    await attempt(b)
    // A watch stream that hangs: the watch is never in place, and its read never sent.
    store.watch = () => new Promise<never>(() => {})
    void engine.wait(b, open())
    assert.equal(await attempt(b), null, 'refused, after a read of its own')
    assert.equal(store.count('check', nameOf('b')), 1)
    await release(a)
    assert.ok(await attempt(b), 'the next attempt finds b first')
  })

  it("a hand-over's lease counts from the waiter's last attempt, as the core counts its validity", async () => {
    const { engine, attempt, release } = setup()
    const a = (await attempt(request('a')))!
    const b = request('b')
    await attempt(b)
    const wait = awaitLater(engine.wait(b, open()))
    // b's attempt kept its lease alive (3 s from just after its start); the hand-over comes later.
    await new Promise((resolve) => setTimeout(resolve, 200))
    await release(a)
    const grant = await wait
    assert.ok(grant)
    // The core counts the grant's ttl from its own start of b's attempt (just before the engine's):
    // the whole 3 s lease is known to last from there. Counted from the hand-over instead, 200 ms of it
    // would be lost, and the core would take them off a second time.
    assert.equal(grant.ttlMs, 3000)
  })

  it('a predecessor that leaves before the watch is in place is not waited for', async () => {
    const { store, engine, attempt, nameOf } = setup()
    await attempt(request('a'))
    const b = request('b')
    await attempt(b)
    // a leaves between b's check and b's watch: the read after the watch must see it gone.
    const original = store.watch.bind(store)
    store.watch = async (entry) => {
      store.delete(entry.name)
      return original(entry)
    }
    const wait = engine.wait(b, open())
    assert.equal(await settled(wait), true, 'b did not wait for a deletion event that never comes')
    assert.ok(await wait, 'b is granted')
    assert.equal(store.queue('jobs/')[0]?.name, nameOf('b'))
  })

  it('a wake-up read from a replica behind the deletion is read again in full', async () => {
    const { store, engine, attempt, release, nameOf } = setup()
    const a = (await attempt(request('a')))!
    const b = request('b')
    await attempt(b)
    const wait = engine.wait(b, open())
    await settled(wait)
    store.replicaBehind = true
    const checks = store.count('check', nameOf('b'))
    await release(a)
    assert.ok(await wait, 'b is granted')
    assert.equal(store.count('check-after', nameOf('b')), 1, 'the cheap read came first')
    assert.equal(store.count('check', nameOf('b')), checks + 1, 'then one full read')
  })

  it('a waiter whose entry vanished while it waited is not granted, even once first in line', async () => {
    const { store, engine, attempt, release, nameOf } = setup()
    const a = (await attempt(request('a')))!
    const b = request('b')
    await attempt(b)
    const wait = awaitLater(engine.wait(b, open()))
    await settle()
    store.delete(nameOf('b'))
    await release(a)
    assert.equal(await wait, undefined, 'no grant without our entry')
    assert.equal(store.queue('jobs/').length, 0)
    // The next attempt is a new acquisition: it puts a new entry (and is granted, the queue being empty).
    const again = await attempt(b)
    assert.ok(again)
    assert.ok(store.isMine((again.cookie as Acquisition<number>).entry!))
  })

  it('a waiter whose lease expires stops waiting at once and is not granted', async () => {
    const { store, engine, attempt, nameOf } = setup()
    const holder = (await attempt(request('h')))!
    // A longer ttl: another session, so only the waiter's lease expires.
    const b = { ...request('b'), ttlMs: 5000 }
    await attempt(b)
    const wait = awaitLater(engine.wait(b, open()))
    await settle()
    store.expire(store.entries.get(nameOf('b'))!.lease)
    assert.equal(await settled(wait), true, 'the wait ended without the holder leaving')
    assert.equal(await wait, undefined)
    assert.equal(holder.lost!.aborted, false)
  })

  it('an attempt whose reply was lost finds its entry on the retry: one entry, the first fence', async () => {
    const { store, attempt } = setup()
    const a = request('a')
    store.loseNextReply = true
    await assert.rejects(attempt(a), /reply lost/)
    const written = store.queue('jobs/')
    assert.equal(written.length, 1, 'the write landed')
    const grant = await attempt(a)
    assert.ok(grant)
    assert.equal(grant.fence, written[0]!.position)
    assert.equal(store.queue('jobs/').length, 1, 'no second entry')
  })

  it('abandon removes the entry of a write that lands after it was called', async () => {
    const { store, engine } = setup()
    const a = request('a')
    const gate = deferred()
    store.holdNextWrite = gate.promise
    const controller = new AbortController()
    const attempt = awaitLater(engine.attempt(a, controller.signal))
    await settle()
    assert.equal(store.count('enqueue', 'jobs/1-a'), 1, 'the write is in flight')
    controller.abort(new Error('given up'))
    await assert.rejects(attempt, /given up/)
    const abandon = awaitLater(engine.abandon(a, open()))
    await settle()
    assert.equal(
      store.calls.filter((c) => c.op === 'removeNames').length,
      0,
      'no delete before the write settles',
    )
    gate.resolve()
    await abandon
    assert.equal(store.queue('jobs/').length, 0, 'the late write left nothing behind')
  })

  it('abandon removes an entry granted by a hand-over the caller never took', async () => {
    const { store, engine, attempt, release } = setup()
    const a = (await attempt(request('a')))!
    const b = request('b')
    await attempt(b)
    const wait = awaitLater(engine.wait(b, open()))
    await release(a)
    assert.ok(await wait)
    await engine.abandon(b, open())
    assert.equal(store.queue('jobs/').length, 0)
  })

  it('a release whose delete fails is sent again: a waiter of the same client behind it is granted', async () => {
    const { store, engine, attempt, release, nameOf } = setup()
    const a = (await attempt(request('a')))!
    const b = request('b')
    await attempt(b)
    const wait = awaitLater(engine.wait(b, open()))
    // The waiter keeps the session alive: revoking it once unused would never delete a's entry.
    store.failDeletes = 2
    const aName = nameOf('a')
    await assert.rejects(release(a), /leader changed/)
    const next = await alive(wait)
    assert.ok(next, 'the waiter behind the failed release is granted once the delete goes through')
    assert.equal(store.entries.has(aName), false)
    assert.equal(store.count('remove', aName), 3, 'the failed delete, sent twice more')
  })

  it('a clean-up whose delete fails is sent again: a waiter of the same client behind it is granted', async () => {
    const { store, engine, attempt } = setup()
    const a = request('a')
    assert.ok(await attempt(a))
    const b = request('b')
    await attempt(b)
    const wait = awaitLater(engine.wait(b, open()))
    store.failDeletes = 1
    await assert.rejects(engine.abandon(a, open()), /leader changed/)
    assert.ok(
      await alive(wait),
      'the waiter behind the failed clean-up is granted once the delete goes through',
    )
  })

  it("a holder's lost signal aborts when the store reports its session's lease gone", async () => {
    const { store, attempt } = setup()
    const a = (await attempt(request('a')))!
    store.leases.get(store.queue('jobs/')[0]!.lease)!.events.lost(new Error('lease gone'))
    assert.match(String(await abortedWithin(a.lost!, 5000)), /lease gone/)
  })

  it("a holder's lost signal aborts when its entry is deleted behind its back", async () => {
    const { store, attempt, nameOf } = setup()
    const a = (await attempt(request('a')))!
    store.delete(nameOf('a'))
    assert.match(String(await abortedWithin(a.lost!, 5000)), /deleted/)
  })

  it('extend: renewed while the entry and lease live; a keep-alive that finds the lease gone is a loss', async () => {
    const { store, engine, attempt } = setup()
    const a = (await attempt(request('a')))!
    const acq = a.cookie as Acquisition<number>
    const renewed = await engine.extend(acq, 3000, open())
    assert.equal(renewed.renewed, true)
    store.leases.get(store.queue('jobs/')[0]!.lease)!.answer = 0
    assert.deepEqual(await engine.extend(acq, 3000, open()), { renewed: false })
    await abortedWithin(a.lost!, 5000)
  })

  it("where every answered request keeps the lease alive, an acquire's write is its keep-alive: none beside it, full ttl", async () => {
    for (const requestsKeepAlive of [true, false]) {
      const { store, attempt, release } = setup()
      store.requestsKeepAlive = requestsKeepAlive
      release((await attempt(request('a')))!)
      // The lease's grant is now older than the next attempt: known to last less than its ttl from then.
      await new Promise((resolve) => setTimeout(resolve, 30))
      const b = (await attempt(request('b')))!
      // Counted from the write's send (no earlier than the attempt's start): the full ttl of the lease.
      assert.equal(b.ttlMs, 3000, `requestsKeepAlive ${requestsKeepAlive}`)
      // etcd (no opt-in): a keep-alive beside each write, as before.
      assert.equal(store.keepAlives, requestsKeepAlive ? 0 : 2, `requestsKeepAlive ${requestsKeepAlive}`)
      await release(b)
    }
  })

  it('no keep-alive beside a write where the latest write found the lock held; one after it if free after all', async () => {
    const { store, engine, attempt, release } = setup()
    const a = (await attempt(request('a')))!
    assert.equal(store.keepAlives, 1, 'a keep-alive beside the first write: granted at once, full ttl')
    await attempt(request('b'))
    assert.equal(store.keepAlives, 2, 'nothing said the lock was held yet')
    await attempt(request('c'))
    assert.equal(store.keepAlives, 2, 'the latest write found it held: c waits, no keep-alive')
    await release(a)
    await engine.abandon(request('b'), open())
    await engine.abandon(request('c'), open())
    const d = (await attempt(request('d')))!
    assert.equal(store.keepAlives, 3, 'free after all: the keep-alive after the write')
    assert.equal(d.ttlMs, 3000, 'the full ttl all the same')
    await release(d)
    await attempt(request('e'))
    assert.equal(store.keepAlives, 4, 'found free last time: beside the write again')
  })

  it('extend to a longer lease moves the entry, keeping its position (fence and place in line)', async () => {
    const { store, engine, attempt } = setup()
    const a = (await attempt(request('a')))!
    const before = store.queue('jobs/')[0]!
    const result = await engine.extend(a.cookie as Acquisition<number>, 10_000, open())
    assert.equal(result.renewed, true)
    const after = store.queue('jobs/')[0]!
    assert.equal(after.position, before.position)
    assert.notEqual(after.lease, before.lease)
    assert.equal(store.leases.get(after.lease)!.leaseMs, 10_000)
  })

  it('extend never moves the entry onto a lease not known to outlive its own: a move whose reply is lost could not shorten it', async () => {
    const { store, engine, attempt } = setup()
    // The 10 s lease, granted first and kept alive no more: it is known to last until its grant + 10 s.
    await attempt({ key: 'other', owner: 'c', ttlMs: 10_000 })
    const longer = [...store.leases.values()].find((lease) => lease.leaseMs === 10_000)!
    longer.answer = new Error('the keep-alive went unanswered')
    await new Promise((resolve) => setTimeout(resolve, 1200))
    // Our 9 s lease, granted over a second later, is known to last longer than that one.
    const a = (await attempt({ key: 'jobs', owner: 'a', ttlMs: 9000 }))!
    const before = store.queue('jobs/')[0]!
    // Any move that is sent lands, and its reply is lost.
    const move = store.move.bind(store)
    store.move = async (...args) => {
      await move(...args)
      throw new Error('the reply to the move was lost')
    }
    await assert.rejects(engine.extend(a.cookie as Acquisition<number>, 10_000, open()))
    assert.equal(
      store.queue('jobs/')[0]!.lease,
      before.lease,
      'the entry stayed on the lease that outlives the validity',
    )
    // Once that lease answers its keep-alive again, the move goes ahead (its reply lost again: unknown).
    longer.answer = 10_000
    await assert.rejects(engine.extend(a.cookie as Acquisition<number>, 10_000, open()))
    assert.equal(store.queue('jobs/')[0]!.lease, longer.id)
  })

  it('close ends the waits still under way, whose own signals never abort, and takes no session after', async () => {
    const { store, engine, attempt } = setup()
    await attempt(request('a'))
    const b = request('b')
    await attempt(b)
    // A watch that never reports (the store's own close may not reach it): only close can end the wait.
    store.watch = async () => ({ gone: new Promise<never>(() => {}), cancel: () => {} })
    const wait = awaitLater(engine.wait(b, open()))
    assert.equal(await settled(wait), false, 'b waits in line')
    await engine.close()
    assert.equal(await alive(wait), undefined, 'the wait ended with the engine')
    // An attempt after close grants no lease: nobody would revoke it, and its keep-alives would go on.
    const leases = store.leases.size
    await assert.rejects(engine.attempt(request('c'), open()), /closed/)
    assert.equal(store.leases.size, leases, 'no lease granted after close')
  })
})
