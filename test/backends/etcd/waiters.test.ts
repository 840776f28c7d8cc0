import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Etcd3 } from 'etcd3'
import { EtcdQueue } from '../../../src/backends/etcd/queue.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'
import { sleep } from '../../support/time.js'
import { pollUntil } from '../../support/wait.js'

/**
 * Many waiters of one lock in one client: their waits share the client's one watcher on the lock's line
 * (src/backends/etcd/queue-watch.ts), each listening for the deletion of the key before its own. With a
 * watcher per wait, etcd3 set them up one after the other, and at 125 waiters per client under load the
 * last were in place seconds later: meanwhile hand-overs waited for the core's polls (about a second each)
 * and each idle waiter read the line once a second.
 */
describe('etcd: many waiters of one lock in one client', { timeout: 120_000 }, () => {
  let cluster: EtcdCluster
  let admin: Etcd3
  const open: LockClient[] = []

  /** etcd's own count of watchers (its Prometheus metrics on the client port). */
  const watchers = async () => {
    const text = await (await fetch(`http://${cluster.members[0]!.endpoint}/metrics`)).text()
    const line = text.split('\n').find((l) => l.startsWith('etcd_debugging_mvcc_watcher_total '))
    return Number(line?.split(' ')[1])
  }

  before(async () => {
    cluster = await startEtcd(1)
    admin = new Etcd3({ hosts: cluster.endpoints })
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    admin.close()
    await cluster.destroy()
  })

  it('waits on the keys of one line share one etcd watcher, and each wakes only for its own key', async () => {
    const queue = new EtcdQueue(admin, 'shared/')
    try {
      const line = 'shared/line/'
      const keys = Array.from({ length: 30 }, (_, i) => `${line}${String(i).padStart(2, '0')}`)
      for (const key of keys) await admin.put(key).value('x')
      const entries = await Promise.all(keys.map(async (key) => (await admin.get(key).exec()).kvs[0]!))
      const before = await watchers()
      const waits = await Promise.all(entries.map((kv) => queue.watch(kv)))
      // In place once `watch` resolved: the stream's keeper and the line's watcher, not one per wait.
      const added = (await watchers()) - before
      assert.ok(added <= 2, `${added} etcd watchers for ${waits.length} waits on one line`)
      const woken = new Set<number>()
      waits.forEach((w, i) => void w.gone.then(() => woken.add(i)))
      const deleted = await admin.delete().key(keys[7]!).exec()
      const at = await waits[7]!.gone
      assert.equal(at, BigInt(deleted.header.revision), 'the deletion of its key, with its revision')
      // A later deletion has been delivered too (one stream, in order): nobody else woke for key 7's.
      await admin.delete().key(keys[3]!).exec()
      await waits[3]!.gone
      assert.deepEqual([...woken].sort(), [3, 7])
      for (const w of waits) w.cancel()
      const left = await pollUntil(watchers, (n) => n <= before + 1, { withinMs: 10_000 })
      assert.ok(left <= before + 1, `the line's watcher goes with its last wait (${left - before} left)`)
    } finally {
      await queue.close()
    }
  })

  it('60 waiters in one client add one etcd watcher, and are all served', async () => {
    const holder = createLockClient(cluster.url(), { ttl: '30s', renew: false })
    const waiting = createLockClient(cluster.url(), { ttl: '30s', renew: false })
    open.push(holder, waiting)
    const key = 'sixty'
    const lock = await holder.acquire(key)
    const before = await watchers()
    const order: number[] = []
    const acquires = Array.from({ length: 60 }, async (_, i) => {
      const mine = await waiting.acquire(key, { timeout: '100s' })
      order.push(i)
      await mine.release()
    })
    const served = Promise.all(acquires)
    served.catch(() => {})
    const inLine = await pollUntil(
      async () => await admin.getAll().prefix(`fencelock/${key}/`).count(),
      (n) => n === 61,
      { withinMs: 30_000, everyMs: 50 },
    )
    assert.equal(inLine, 61, 'every waiter is in line')
    // A moment for the waits to set up their watches (with one watcher per wait, dozens are up by then).
    await sleep(3000)
    // The waiting client's stream keeper and line watcher; the holder's two may come after `before` too
    // (it watches its key once its grant has reached it, without waiting).
    const added = (await watchers()) - before
    assert.ok(added <= 4, `${added} etcd watchers for 60 waiters in one client`)
    await lock.release()
    await served
    assert.equal(order.length, 60, 'every waiter was served')
  })
})
