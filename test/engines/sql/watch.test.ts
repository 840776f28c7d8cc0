/**
 * The sql-lease engine with a per-waiter wake-up (`SqlAdapter.watch`, MySQL's doorbell) and refusals that
 * carry only the holder's remaining lease (`remainingMs`, what MySQL's one-integer reply can say): the
 * core re-arms its hint about once a second (aborting the last one), and that must not count as news.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { SqlAdapter } from '../../../src/engines/sql/adapter.js'
import { sqlLeaseBackend } from '../../../src/engines/sql/backend.js'
import { createLockClient, LockNotAcquiredError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'
import { FakeSqlDialect, FakeSqlServer } from './fake-store.js'

/** A client whose adapter has a doorbell that `ring()` wakes, and refusals without the holder's row. */
function doorbellClient(server: FakeSqlServer) {
  const fake = new FakeSqlDialect(server)
  const rings = new Set<() => void>()
  const adapter: SqlAdapter = {
    ...fake.withoutNotifications(),
    acquire: async (req, signal) => {
      const out = await fake.acquire(req, signal)
      return out.granted ? out : { granted: false, remainingMs: out.current?.remainingMs }
    },
    watch: (_key, signal) =>
      new Promise<void>((resolve) => {
        const done = () => {
          rings.delete(done)
          resolve()
        }
        rings.add(done)
        signal.addEventListener('abort', done, { once: true })
      }),
  }
  const backend = sqlLeaseBackend(adapter, { pollMaxMs: 5000 })
  return {
    client: createLockClient(backend, { ttl: 30_000 }),
    ring: () => {
      for (const r of [...rings]) r()
    },
    /** Doorbell waits running now. */
    watching: () => rings.size,
  }
}

describe('sql-lease: a watch (doorbell) and refusals with only the remaining lease', () => {
  it('a re-armed (aborted) watch is no news: the waiter keeps its pace instead of asking at every poll', async () => {
    const server = new FakeSqlServer()
    const holder = doorbellClient(server)
    const waiter = doorbellClient(server)
    const lock = await holder.client.acquire('k')
    const before = server.count('acquire')
    await assert.rejects(waiter.client.acquire('k', { timeout: '3500ms' }), LockNotAcquiredError)
    // One statement (the refused attempt); the paced re-checks answer from what it said. Asking again at
    // every re-arm of the hint (about once a second) would make 4 or more.
    assert.ok(server.count('acquire') - before <= 2, `${server.count('acquire') - before} statements`)
    await lock.release()
    await Promise.all([holder.client.close(), waiter.client.close()])
  })

  it('a ring is news: the waiter asks at once and gets the released lock', async () => {
    const server = new FakeSqlServer()
    const holder = doorbellClient(server)
    const waiter = doorbellClient(server)
    const lock = await holder.client.acquire('k')
    const waiting = awaitLater(waiter.client.acquire('k', { timeout: '20s' }))
    // Well inside the 5 s pace: only the ring can make the waiter ask again this soon.
    await new Promise((resolve) => setTimeout(resolve, 300))
    await lock.release()
    const started = performance.now()
    waiter.ring()
    const next = await waiting
    assert.ok(performance.now() - started < 4000, 'woken by the ring, not by the 5 s pace')
    assert.ok(next.fence > lock.fence)
    await next.release()
    await Promise.all([holder.client.close(), waiter.client.close()])
  })

  it('a ring wakes one waiter of the client: statements per release stay flat with 10 waiters', async () => {
    const server = new FakeSqlServer()
    const holder = doorbellClient(server)
    const waiter = doorbellClient(server)
    const first = await holder.client.acquire('k')
    const waiting = Array.from({ length: 10 }, () =>
      awaitLater(waiter.client.acquire('k', { timeout: '60s' })),
    )
    await waitUntil(() => server.count('acquire', 'k') >= 11, 'every waiter to ask once')
    await sleep(300)
    const pending = new Map(waiting.map((p, i) => [i, p.then(() => i)]))
    let lock = first
    while (pending.size > 0) {
      await waitUntil(() => waiter.watching() > 0, 'the doorbell wait')
      assert.equal(waiter.watching(), 1, 'one doorbell wait per key per client')
      const asked = server.count('acquire', 'k')
      await lock.release()
      waiter.ring()
      const next = await Promise.race(pending.values())
      pending.delete(next)
      lock = await waiting[next]!
      await sleep(100)
      const perRelease = server.count('acquire', 'k') - asked
      assert.ok(perRelease <= 2, `${perRelease} statements for one ring, ${pending.size + 1} waiting`)
    }
    await lock.release()
    await Promise.all([holder.client.close(), waiter.client.close()])
  })
})
