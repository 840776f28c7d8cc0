import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { now } from '../../../src/core/clock.js'
import type { SessionAdapter } from '../../../src/engines/session/adapter.js'
import { idleMs, type Session, SessionPool } from '../../../src/engines/session/pool.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'
import { FakeQueueStore, settle } from '../queue/fake-store.js'

/**
 * The session engine against the in-memory store: aliveUntil moves only with acknowledged keep-alives,
 * a lease reported gone aborts `lost` and is never handed out again, and idle sessions are revoked.
 */

type User = string

function setup(idle?: (leaseMs: number) => number) {
  const store = new FakeQueueStore()
  const lost: Array<{ session: Session<User, number>; reason: Error }> = []
  const pool = new SessionPool<User, number>(store, (session, reason) => lost.push({ session, reason }), idle)
  const leaseOf = async (session: Session<User, number>) => store.leases.get(await session.id)!
  return { store, pool, lost, leaseOf }
}

describe('session engine', { timeout: 10_000 }, () => {
  it('aliveUntil starts at the grant and moves only with acknowledged keep-alives', async () => {
    const { pool, leaseOf } = setup()
    const before = now()
    const session = pool.session(3000)
    assert.equal(session.aliveUntil, Number.NEGATIVE_INFINITY, 'nothing is known before the grant')
    await session.id
    await settle()
    assert.ok(session.aliveUntil >= before + 3000 && session.aliveUntil <= now() + 3000)
    const granted = session.aliveUntil
    const lease = await leaseOf(session)

    // An acknowledged keep-alive sent later moves it; an older acknowledgement never moves it back.
    const sentAt = now() + 1
    lease.events.acknowledged(sentAt, 3000)
    assert.equal(session.aliveUntil, sentAt + 3000)
    lease.events.acknowledged(sentAt - 500, 3000)
    assert.equal(session.aliveUntil, sentAt + 3000)

    // A keep-alive answered "gone" or not answered at all moves nothing.
    lease.answer = 0
    assert.equal(await pool.keepAlive(session), false)
    lease.answer = new Error('unreachable')
    await assert.rejects(pool.keepAlive(session), /unreachable/)
    assert.equal(session.aliveUntil, sentAt + 3000)

    // An answered one does, from its send time.
    lease.answer = 60_000
    const sending = now()
    assert.equal(await pool.keepAlive(session), true)
    assert.ok(session.aliveUntil >= sending + 60_000 && session.aliveUntil > granted)
  })

  it('a lease reported gone aborts lost, tells the pool owner, and is never handed out again', async () => {
    const { pool, lost, leaseOf } = setup()
    const session = pool.session(3000)
    pool.use(session, 'holder')
    const lease = await leaseOf(session)
    lease.events.lost(new Error('lease expired'))
    assert.equal(session.lost.aborted, true)
    assert.match(String(session.lost.reason), /lease expired/)
    assert.equal(lost.length, 1)
    assert.equal(lost[0]!.session, session)
    assert.notEqual(pool.session(3000), session, 'a new session replaces it')
    assert.equal(lease.revoked, false, 'still counted: revoked when its last user leaves')
    pool.leave(session, 'holder')
    assert.equal(lease.revoked, true)
  })

  it('sessions are shared per lease length', async () => {
    const { pool } = setup()
    assert.equal(pool.session(pool.leaseMs(2500)), pool.session(pool.leaseMs(3000)))
    assert.notEqual(pool.session(3000), pool.session(4000))
  })

  it('an idle session is revoked after its idle time; one with a user stays', async () => {
    const { pool, leaseOf } = setup(() => 20)
    const idle = pool.session(1000)
    const busy = pool.session(2000)
    pool.use(idle, 'a')
    pool.use(busy, 'b')
    pool.leave(idle, 'a')
    const [idleLease, busyLease] = [await leaseOf(idle), await leaseOf(busy)]
    await waitUntil(() => idleLease.revoked, 'the idle session to be revoked', { withinMs: 5000 })
    assert.equal(busyLease.revoked, false)
    assert.notEqual(pool.session(1000), idle, 'a revoked session is not handed out again')
  })

  it('a retired session takes no new user and is revoked when its last user leaves', async () => {
    const { pool, leaseOf } = setup()
    const session = pool.session(3000)
    pool.use(session, 'a')
    pool.retire(session)
    assert.notEqual(pool.session(3000), session)
    const lease = await leaseOf(session)
    assert.equal(lease.revoked, false)
    pool.leave(session, 'a')
    assert.equal(lease.revoked, true)
  })

  it('close revokes every lease', async () => {
    const { pool, store } = setup()
    pool.session(1000)
    pool.session(2000)
    await pool.close()
    assert.deepEqual(
      [...store.leases.values()].map((l) => l.revoked),
      [true, true],
    )
  })

  it('an adapter whose client does not report keep-alives gets them from the engine, counted at the length the store granted', async () => {
    const store = new FakeQueueStore()
    let sent = 0
    // The store grants 400 ms whatever is asked (a ZooKeeper session timeout clamped by the server).
    const adapter: SessionAdapter<number> = {
      leaseMs: (ttlMs) => ttlMs,
      keepAliveEveryMs: () => 20,
      grant(leaseMs, events) {
        const lease = store.grant(leaseMs, events)
        return {
          ...lease,
          grantedMs: () => 400,
          keepAliveOnce: () => {
            sent++
            return lease.keepAliveOnce().then((ttl) => (ttl > 0 ? 400 : ttl))
          },
        }
      },
    }
    const pool = new SessionPool<User, number>(adapter, () => {})
    const before = now()
    const session = pool.session(3000)
    pool.use(session, 'holder')
    await session.id
    await settle()
    assert.ok(session.aliveUntil <= now() + 400, 'the granted length counts, not the one asked')
    assert.ok(session.aliveUntil >= before + 400)
    // Kept alive without anyone asking: aliveUntil moves on by itself.
    const first = session.aliveUntil
    await waitUntil(() => session.aliveUntil > first + 40 && sent >= 3, 'keep-alives sent by the engine')
    // Answered "gone" moves nothing; after the lease is lost or revoked, none is sent.
    const lease = store.leases.get(await session.id)!
    lease.alive = false
    await waitUntil(() => sent >= 6, 'keep-alives that find the lease gone')
    const last = session.aliveUntil
    await sleep(60)
    assert.equal(session.aliveUntil, last)
    lease.events.lost(new Error('session expired'))
    const after = sent
    await sleep(100)
    assert.ok(sent <= after + 1, `keep-alives stop once the lease is lost (${sent - after} more)`)
    await pool.close()
  })

  it('idleMs is one ttl, between 2 s and 30 s', () => {
    assert.deepEqual([idleMs(1000), idleMs(5000), idleMs(3_600_000)], [2000, 5000, 30_000])
  })
})
