/**
 * The sql-lease engine (src/engines/sql/engine.ts) against an in-memory adapter (fake-sql-adapter.ts): the
 * statements' outcomes, uncertain outcomes settled by re-reading the owner, abandon, the paced poll, the
 * notifications and their fallback, and the table made on first use. Timing checks are bounds with
 * generous slack; counts of statements are exact where the algorithm fixes them.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { AcquireRequest } from '../../../src/core/backend.js'
import { sqlLeaseBackend } from '../../../src/engines/sql/backend.js'
import type { SqlLeaseOptions } from '../../../src/engines/sql/engine.js'
import { BackendUnavailableError, createLockClient } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'
import { FakeSqlDialect, FakeSqlServer } from './fake-store.js'

const signal = () => AbortSignal.timeout(10_000)

/** One process: its own engine and connection over the shared fake server. */
function processOn(server: FakeSqlServer, options: SqlLeaseOptions & { notifies?: boolean } = {}) {
  const adapter = new FakeSqlDialect(server)
  const backend = sqlLeaseBackend(
    options.notifies === false ? adapter.withoutNotifications() : adapter,
    options,
  )
  return { adapter, backend, client: createLockClient(backend, { ttl: 2000 }) }
}

const req = (owner: string, ttlMs = 1000): AcquireRequest => ({ key: 'k', owner, ttlMs })

describe('sql-lease: grants and fences', () => {
  it('grants a new row with fence 1, refuses another owner, and advances the fence only on grants', async () => {
    const server = new FakeSqlServer()
    const { backend } = processOn(server)
    const a = await backend.tryAcquire(req('a'.repeat(32)), signal())
    assert.ok(a.granted)
    assert.equal(a.fence, 1n)
    const b = await backend.tryAcquire(req('b'.repeat(32)), signal())
    assert.equal(b.granted, false)
    assert.ok(!b.granted && b.retryInMs !== undefined && b.retryInMs <= 1001, 'paced by the remaining lease')
    const held = { key: 'k', owner: 'a'.repeat(32), fence: 1n, cookie: undefined }
    assert.deepEqual(await backend.extend(held, 1000, signal()), { renewed: true, ttlMs: 1000 })
    assert.equal(await backend.release(held, signal()), true)
    assert.equal(server.rows.get('k')!.fence, 1n, 'a release keeps the fence')
    const c = await backend.tryAcquire(req('c'.repeat(32)), signal())
    assert.ok(c.granted && c.fence === 2n, 'a released row is granted with fence + 1')
    server.expire('k')
    const d = await backend.tryAcquire(req('d'.repeat(32)), signal())
    assert.ok(d.granted && d.fence === 3n, 'an expired row is taken over with fence + 1')
    assert.equal(server.rows.size, 1, 'rows are never deleted or duplicated')
  })

  it('a lost reply of a grant: the next attempt of the same acquire gets it again, same fence', async () => {
    const server = new FakeSqlServer()
    const { backend, adapter } = processOn(server)
    adapter.next('acquire', 'lose-reply')
    await assert.rejects(backend.tryAcquire(req('a'.repeat(32)), signal()), BackendUnavailableError)
    const again = await backend.tryAcquire(req('a'.repeat(32)), signal())
    assert.ok(again.granted && again.fence === 1n)
  })

  it('counts validity from the lease the server set, never longer than asked', async () => {
    const server = new FakeSqlServer()
    const { client } = processOn(server)
    const before = performance.now()
    const lock = await client.acquire('k', { ttl: 1000, renew: false })
    assert.ok(lock.validUntil <= before + 1000 + 1, 'validity counted from before the statement')
    await lock.release()
  })
})

describe('sql-lease: uncertain outcomes settled by re-reading the owner', () => {
  const owner = 'a'.repeat(32)
  const held = { key: 'k', owner, fence: 1n, cookie: undefined }

  it('extend: an unknown outcome on a row taken by another is a loss; on our row it stays unknown', async () => {
    const server = new FakeSqlServer()
    const { backend, adapter } = processOn(server)
    await backend.tryAcquire(req(owner), signal())
    adapter.next('extend', 'throw-before')
    await assert.rejects(backend.extend(held, 1000, signal()), BackendUnavailableError)
    server.expire('k')
    await backend.tryAcquire(req('b'.repeat(32)), signal())
    adapter.next('extend', 'throw-before')
    assert.deepEqual(await backend.extend(held, 1000, signal()), { renewed: false })
  })

  it('release: a lost reply is recognised as done; a release that did not run is repeated', async () => {
    const server = new FakeSqlServer()
    const { backend, adapter } = processOn(server)
    await backend.tryAcquire(req(owner), signal())
    adapter.next('release', 'lose-reply')
    assert.equal(await backend.release(held, signal()), true)
    assert.equal(server.rows.get('k')!.released, true)
    const again = await backend.tryAcquire(req('c'.repeat(32)), signal())
    assert.ok(again.granted)
    const mine = { key: 'k', owner: 'c'.repeat(32), fence: again.fence, cookie: undefined }
    adapter.next('release', 'throw-before')
    assert.equal(await backend.release(mine, signal()), true)
    assert.equal(server.count('release'), 2, 'the lost reply, then the repeat (the failed one never ran)')
    assert.equal(server.rows.get('k')!.released, true)
  })

  it('abandon: no statement after refusals only; an owner-checked release after an unknown outcome', async () => {
    const server = new FakeSqlServer()
    const { backend, adapter } = processOn(server)
    await backend.tryAcquire(req('h'.repeat(32)), signal())
    await backend.tryAcquire(req(owner), signal())
    await backend.abandon(req(owner), signal())
    assert.equal(server.count('release'), 0, 'a refused acquire left nothing to clean up')
    server.expire('k')
    adapter.next('acquire', 'lose-reply')
    await assert.rejects(backend.tryAcquire(req('x'.repeat(32)), signal()))
    assert.equal(server.rows.get('k')!.owner, 'x'.repeat(32), 'the lost grant landed')
    await backend.abandon(req('x'.repeat(32)), signal())
    assert.equal(server.rows.get('k')!.released, true, 'and abandon released it')
  })

  it('abandon: a late refusal of an earlier attempt does not hide a later grant whose reply was lost', async () => {
    const server = new FakeSqlServer()
    const { backend, adapter } = processOn(server)
    await backend.tryAcquire(req('h'.repeat(32)), signal())
    // The first attempt is refused on the server, its reply slow: the core gave up on it and tried again.
    let replyArrives!: () => void
    adapter.next('acquire', {
      lateReply: new Promise<void>((resolve) => {
        replyArrives = resolve
      }),
    })
    const first = awaitLater(backend.tryAcquire(req(owner), signal()))
    await waitUntil(() => server.count('acquire') === 2, 'the first attempt applied')
    // The holder's lease ends; the second attempt is granted, its reply lost.
    server.expire('k')
    adapter.next('acquire', 'lose-reply')
    await assert.rejects(backend.tryAcquire(req(owner), signal()), BackendUnavailableError)
    assert.equal(server.rows.get('k')!.owner, owner, 'the lost grant landed')
    replyArrives()
    assert.equal((await first).granted, false)
    await backend.abandon(req(owner), signal())
    assert.equal(server.rows.get('k')!.released, true, 'abandon released the lost grant')
  })
})

describe('sql-lease: waiting', () => {
  it('without notifications a waiter asks at most about once a second, and gets a released lock', async () => {
    const server = new FakeSqlServer()
    const holder = processOn(server, { notifies: false })
    const waiter = processOn(server, { notifies: false })
    assert.equal(waiter.backend.capabilities.notify, false)
    const lock = await holder.client.acquire('k', { ttl: 10_000 })
    const start = performance.now()
    const waiting = awaitLater(waiter.client.acquire('k', { ttl: 1000, timeout: 20_000 }))
    await sleep(2500)
    const asked = server.count('acquire', 'k') - 1
    const seconds = (performance.now() - start) / 1000
    assert.ok(asked <= Math.ceil(seconds) + 1, `${asked} statements in ${seconds.toFixed(1)} s of waiting`)
    await lock.release()
    const next = await waiting
    assert.equal(next.fence, 2n)
    await next.release()
  })

  it('re-checks a crashed holder no later than its remaining lease', async () => {
    const server = new FakeSqlServer()
    const holder = processOn(server, { notifies: false })
    const waiter = processOn(server, { notifies: false })
    await holder.backend.tryAcquire({ key: 'k', owner: 'd'.repeat(32), ttlMs: 300 }, signal())
    const start = performance.now()
    const lock = await waiter.client.acquire('k', { timeout: 10_000 })
    assert.ok(performance.now() - start >= 290, 'not before the lease ended on the server clock')
    assert.equal(lock.fence, 2n)
    await lock.release()
  })

  it('a release wakes a notified waiter at once; a gap in notifications makes waiters re-check', async () => {
    const server = new FakeSqlServer()
    const holder = processOn(server, { pollMaxMs: 60_000 })
    const waiter = processOn(server, { pollMaxMs: 60_000 })
    assert.equal(waiter.backend.capabilities.notify, true)
    const first = await holder.client.acquire('k', { ttl: 30_000 })
    const waiting = awaitLater(waiter.client.acquire('k', { timeout: 20_000 }))
    await waitUntil(() => server.listeners.size > 0, 'the waiter to listen')
    await first.release()
    const second = await waiting
    assert.equal(second.fence, 2n)
    // A release whose notification is lost: the gap (a re-made subscription) wakes the waiter anyway.
    const third = awaitLater(holder.client.acquire('k', { timeout: 20_000 }))
    await sleep(100)
    server.dropNotifications = true
    await second.release()
    server.dropNotifications = false
    await sleep(100)
    server.gap()
    const lock = await third
    assert.equal(lock.fence, 3n)
    await lock.release()
  })

  it('a release notified while a refused statement is on its way back is not paced away', async () => {
    const server = new FakeSqlServer()
    const holder = processOn(server, { pollMaxMs: 60_000 })
    const waiter = processOn(server, { pollMaxMs: 60_000 })
    // The waiter subscribes first (by waiting once), so the release below is heard.
    const warm = await holder.client.acquire('warm')
    const other = awaitLater(waiter.client.acquire('warm', { timeout: 10_000 }))
    await waitUntil(() => server.listeners.size > 0, 'the waiter to listen')
    await warm.release()
    await (await other).release()
    const first = await holder.client.acquire('k', { ttl: 30_000 })
    let reply!: () => void
    waiter.adapter.next('acquire', {
      lateReply: new Promise<void>((resolve) => {
        reply = resolve
      }),
    })
    const waiting = awaitLater(waiter.client.acquire('k', { timeout: 5000 }))
    await waitUntil(() => server.count('acquire', 'k') === 2, "the waiter's refused statement")
    await first.release()
    await sleep(20)
    reply()
    const lock = await waiting
    assert.equal(lock.fence, 2n)
    await lock.release()
  })

  it('falls back to the paced poll when a subscription never proves itself', async () => {
    const server = new FakeSqlServer()
    server.listenFails = true
    const holder = processOn(server, { listenTimeoutMs: 200 })
    const waiter = processOn(server, { listenTimeoutMs: 200 })
    const first = await holder.client.acquire('k', { ttl: 30_000 })
    const waiting = awaitLater(waiter.client.acquire('k', { timeout: 20_000 }))
    await sleep(500)
    await first.release()
    const lock = await waiting
    assert.equal(lock.fence, 2n)
    const findings = await waiter.backend.doctor!(signal())
    assert.ok(findings.some((f) => f.level === 'warn' && /LISTEN needs a direct connection/.test(f.message)))
    await lock.release()
  })
})

describe('sql-lease: one waiter per client wakes at a release', () => {
  it('statements per release stay flat with 20 waiters of the key in one client', async () => {
    const server = new FakeSqlServer()
    // A long pace: the waiters' own polls are answered from what was seen, so only wake-ups send statements.
    const holder = processOn(server, { pollMaxMs: 60_000 })
    const waiter = processOn(server, { pollMaxMs: 60_000 })
    const first = await holder.client.acquire('k', { ttl: 30_000 })
    const waiting = Array.from({ length: 20 }, () =>
      awaitLater(waiter.client.acquire('k', { ttl: 30_000, timeout: 60_000 })),
    )
    await waitUntil(() => server.listeners.size > 0, 'the waiters to listen')
    // Settled: every waiter asked, the subscription's gap woke them all once, and they asked again.
    let before = -1
    await waitUntil(
      async () => {
        const count = server.count('acquire', 'k')
        const still = count === before
        before = count
        if (!still) await sleep(300)
        return still
      },
      'the waiters to stop asking',
      { withinMs: 20_000 },
    )
    const pending = new Map(waiting.map((p, i) => [i, p.then(() => i)]))
    let lock = first
    while (pending.size > 0) {
      const asked = server.count('acquire', 'k')
      await lock.release()
      const next = await Promise.race(pending.values())
      pending.delete(next)
      lock = await waiting[next]!
      // Any other woken waiter's statement would be sent by now (the fake answers at once).
      await sleep(100)
      const perRelease = server.count('acquire', 'k') - asked
      // One: the woken waiter's, granted. Every waiter woken would make one per waiter still waiting.
      assert.ok(perRelease <= 2, `${perRelease} statements for one release, ${pending.size + 1} waiting`)
    }
    await lock.release()
    await Promise.all([holder.client.close(), waiter.client.close()])
  })

  it('a woken waiter that leaves without asking passes the wake to the next one', async () => {
    const server = new FakeSqlServer()
    const holder = processOn(server, { pollMaxMs: 60_000 })
    const waiter = processOn(server, { pollMaxMs: 60_000 })
    const reqOf = (owner: string): AcquireRequest => ({ key: 'k', owner, ttlMs: 30_000 })
    const [a, b, c] = ['a', 'b', 'c'].map((o) => reqOf(o.repeat(32))) as [
      AcquireRequest,
      AcquireRequest,
      AcquireRequest,
    ]
    assert.ok((await holder.backend.tryAcquire(reqOf('h'.repeat(32)), signal())).granted)
    const stop = new AbortController()
    const waitOf = (r: AcquireRequest) => {
      let woken = false
      const done = waiter.backend.waitForChange!(r, stop.signal).then(() => {
        woken = true
      })
      return { done, woken: () => woken }
    }
    for (const r of [a, b, c]) assert.equal((await waiter.backend.tryAcquire(r, signal())).granted, false)
    // The subscription, once made, wakes every waiter (notifications before it were missed).
    await Promise.all([a, b, c].map((r) => waitOf(r).done))
    const [wa, wb, wc] = [a, b, c].map(waitOf) as [
      ReturnType<typeof waitOf>,
      ReturnType<typeof waitOf>,
      ReturnType<typeof waitOf>,
    ]
    assert.ok(
      await holder.backend.release(
        { key: 'k', owner: 'h'.repeat(32), fence: 1n, cookie: undefined },
        signal(),
      ),
    )
    await wa.done
    await sleep(50)
    assert.equal(wb.woken() || wc.woken(), false, 'one release wakes one waiter of the client')
    // a gives up before it asked: its wake goes to b, which finds the lock free.
    await waiter.backend.abandon(a, signal())
    await waitUntil(wb.woken, 'the wake to pass from a, which left, to b')
    assert.equal(wc.woken(), false)
    assert.ok((await waiter.backend.tryAcquire(b, signal())).granted)
    stop.abort()
    await wc.done
  })
})

describe('sql-lease: the table', () => {
  it('is created once on first use', async () => {
    const server = new FakeSqlServer()
    const { backend } = processOn(server)
    await Promise.all([backend.tryAcquire(req('a'.repeat(32)), signal()), backend.inspect('k', signal())])
    await backend.tryAcquire(req('b'.repeat(32)), signal())
    assert.equal(server.tablesCreated, 1)
  })

  it('with createTable off, a missing table is an error naming the table and giving the DDL', async () => {
    const server = new FakeSqlServer()
    const { client, backend } = processOn(server, { createTable: false })
    await assert.rejects(client.acquire('k', { timeout: 5000 }), (error: Error) => {
      assert.match(error.message, /"public"\."fencelock_locks" does not exist/)
      assert.match(error.message, /CREATE TABLE/)
      return true
    })
    assert.equal(await backend.inspect('k', signal()), null, 'no table: nobody holds anything')
    const findings = await backend.doctor!(signal())
    assert.ok(findings.some((f) => f.level === 'error' && /CREATE TABLE/.test(f.message)))
    assert.equal(server.tablesCreated, 0)
  })
})

describe('sql-lease: list and break', () => {
  it('list reads held rows only, in byte order, a page per statement until a short page', async () => {
    const server = new FakeSqlServer()
    const { backend } = processOn(server, { listPageSize: 2 })
    const owner = (i: number) => String(i).repeat(32).slice(0, 32)
    const held = ['p/b', 'p/a', 'p/É', 'p/E']
    for (const [i, key] of held.entries())
      assert.ok((await backend.tryAcquire({ ...req(owner(i)), key }, signal())).granted)
    for (const key of ['p/released', 'p/expired', 'q/other']) {
      const grant = await backend.tryAcquire({ ...req(owner(7)), key }, signal())
      assert.ok(grant.granted)
      if (key === 'p/released')
        await backend.release({ key, owner: owner(7), fence: grant.fence, cookie: undefined }, signal())
      if (key === 'p/expired') server.expire(key)
    }
    const found: string[] = []
    for await (const lock of backend.list!('p/', signal())) found.push(lock.key)
    assert.deepEqual(found, ['p/E', 'p/a', 'p/b', 'p/É'])
    // Two full pages, then an empty one that ends the listing.
    assert.equal(server.count('list'), 3)
  })

  it('break on a store without the table: nothing to break, and nothing made', async () => {
    const server = new FakeSqlServer()
    const { backend } = processOn(server)
    assert.deepEqual(await backend.breakLock!('k'), { broken: false })
    assert.equal(server.tablesCreated, 0)
  })

  it("a break that lost to the holder's release never ends the waiter's grant that followed", async () => {
    const server = new FakeSqlServer()
    const { backend, adapter } = processOn(server)
    const stuck = await backend.tryAcquire(req('a'.repeat(32), 60_000), signal())
    assert.ok(stuck.granted)
    const waiter = processOn(server).backend
    const breakLease = adapter.breakLease.bind(adapter)
    let waiterFence: bigint | undefined
    adapter.breakLease = async (...args) => {
      if (waiterFence === undefined) {
        // Between the break's read and its statement, the holder releases and a waiter is granted.
        await backend.release(
          { key: 'k', owner: 'a'.repeat(32), fence: stuck.fence, cookie: undefined },
          signal(),
        )
        const grant = await waiter.tryAcquire(req('b'.repeat(32), 60_000), signal())
        assert.ok(grant.granted)
        waiterFence = grant.fence
      }
      return breakLease(...args)
    }
    const result = await backend.breakLock!('k')
    assert.deepEqual(
      [result.broken, result.lease?.owner, result.lease?.fence],
      [false, 'b'.repeat(32), waiterFence],
    )
    assert.equal((await backend.inspect!('k', signal()))?.owner, 'b'.repeat(32), "the waiter's grant stands")
  })

  it('break gives up after 10 rounds lost to other writers, naming the key', async () => {
    const server = new FakeSqlServer()
    const { backend, adapter } = processOn(server)
    assert.ok((await backend.tryAcquire(req('a'.repeat(32), 60_000), signal())).granted)
    let rounds = 0
    adapter.breakLease = async () => {
      rounds++
      return false
    }
    await assert.rejects(backend.breakLock!('k'), (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError)
      assert.match(error.message, /"k".*changed hands 10 times/)
      return true
    })
    assert.equal(rounds, 10)
  })
})
