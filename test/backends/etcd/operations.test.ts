import assert from 'node:assert/strict'
import { EventEmitter } from 'node:events'
import { after, before, describe, it } from 'node:test'
import * as etcd3 from 'etcd3'
import { etcdBackend, etcdClientOptions } from '../../../src/backends/etcd/index.js'
import { breakLock, listLocks } from '../../../src/backends/etcd/operations.js'
import type { AcquireRequest, LockBackend } from '../../../src/core/backend.js'
import {
  createLockClient,
  type ListedLock,
  type Lock,
  type LockClient,
  LockLostError,
} from '../../../src/index.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'
import { awaitLater } from '../../support/later.js'
import { abortedWithin } from '../../support/wait.js'

/**
 * etcd's list and break beyond the conformance case: listing more keys than one page (and pages that cut
 * a lock's line of keys in two), names with odd characters back exactly as given, a break while waiters
 * wait (the next in line is woken by its watch, not left to a poll), a fence-aimed break racing a new
 * grant, and a holder whose watch never reports the break learning of it at its next extend.
 */
describe('etcd: list and break', { timeout: 180_000 }, () => {
  let cluster: EtcdCluster
  const etcds: etcd3.Etcd3[] = []
  const open: LockClient[] = []
  let run = 0
  /** An etcd3 client of the cluster, closed after the tests. */
  const etcd = () => {
    const client = new etcd3.Etcd3(etcdClientOptions(etcd3, { hosts: cluster.endpoints }))
    etcds.push(client)
    return client
  }
  /** A lock client over `client` (a fresh one by default) on its own key prefix. */
  const locks = (prefix: string, client = etcd(), ttl = '30s') => {
    const made = createLockClient(etcdBackend({ client, prefix }), { ttl })
    open.push(made)
    return made
  }
  const freshPrefix = () => `ops-${process.pid}-${++run}/`
  const collect = async (list: AsyncIterable<ListedLock>) => {
    const found: ListedLock[] = []
    for await (const lock of list) found.push(lock)
    return found
  }
  const never = new AbortController().signal

  before(async () => {
    cluster = await startEtcd(1)
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    for (const client of etcds) client.close()
    await cluster.destroy()
  })

  it('lists 250 held locks across pages (a waiter behind some), each once with its holder, and names as given', async () => {
    const prefix = freshPrefix()
    const holder = locks(prefix)
    const odd = ['dir/a b/ä', '100%', '%2F', 'dir/']
    const keys = [...Array.from({ length: 246 }, (_, i) => `job-${String(i).padStart(3, '0')}`), ...odd]
    const held = new Map<string, Lock>()
    for (const key of keys) held.set(key, await holder.acquire(key))
    // Waiters behind every 10th lock: their keys sort before or after the holder's (lease ids differ), so
    // a page may end inside a lock's line, and the holder is the first by create revision, not by name.
    const waiter = locks(prefix)
    const waits = keys
      .filter((_, i) => i % 10 === 0)
      .map((key) => awaitLater(waiter.acquire(key, { timeout: '60s' })))

    const client = etcd()
    for (const pageSize of [7, 32]) {
      const found = await collect(listLocks(client, prefix, '', never, pageSize))
      assert.deepEqual(found.map((lock) => lock.key).sort(), [...keys].sort(), `page of ${pageSize}`)
      for (const lock of found) {
        assert.equal(lock.owner, held.get(lock.key)!.owner, `${lock.key}: the holder, not a waiter`)
        assert.equal(lock.fence, held.get(lock.key)!.fence, `${lock.key}: fence`)
      }
    }
    // Through the client, with the default page: the same.
    assert.equal((await collect(holder.list())).length, keys.length)
    const underDir = (await collect(holder.list('dir/'))).map((lock) => lock.key).sort()
    assert.deepEqual(underDir, ['dir/', 'dir/a b/ä'])
    assert.deepEqual(
      (await collect(holder.list('%'))).map((lock) => lock.key),
      ['%2F'],
      'a prefix with an escape character',
    )
    // The names list gives are the names break takes.
    for (const key of odd) {
      const broken = await holder.break(key, { fence: held.get(key)!.fence })
      assert.equal(broken.broken, true, `break ${key}`)
    }
    for (const lock of held.values()) await lock.release().catch(() => {})
    for (const lock of await Promise.all(waits)) await lock.release()
    assert.deepEqual(await collect(holder.list()), [])
  })

  it('a break while waiters wait hands the lock to the next in line through its watch', async () => {
    const prefix = freshPrefix()
    const backend = etcdBackend({ client: etcd(), prefix }) as Required<LockBackend>
    const operator = etcdBackend({ client: etcd(), prefix }) as Required<LockBackend>
    try {
      const req = (owner: string): AcquireRequest => ({ key: 'jobs', owner, ttlMs: 60_000 })
      const first = await backend.tryAcquire(req('a'.repeat(32)), never)
      assert.ok(first.granted)
      const second = await backend.tryAcquire(req('b'.repeat(32)), never)
      assert.equal(second.granted, false)
      const third = await backend.tryAcquire(req('c'.repeat(32)), never)
      assert.equal(third.granted, false)
      // `waitForChange` resolves with a grant only when the watch on the entry before ours woke it; the
      // core's polls would come through tryAcquire instead.
      const waited = awaitLater(backend.waitForChange(req('b'.repeat(32)), never))
      const broken = await operator.breakLock('jobs')
      assert.deepEqual(broken, { broken: true, lease: { owner: 'a'.repeat(32), fence: first.fence } })
      const grant = await waited
      assert.ok(grant, 'the next in line was handed the lock by its watch')
      assert.ok(grant.fence > first.fence, 'its fence is greater than the broken one')
      assert.match(String((await abortedWithin(first.lost!, 30_000)) as Error), /deleted/)
      assert.equal((await operator.inspect('jobs', never))?.owner, 'b'.repeat(32))
      await backend.abandon(req('c'.repeat(32)), never)
    } finally {
      await backend.close()
      await operator.close()
    }
  })

  /**
   * A lock held by `stuck` and a client `raced` whose first transaction (a break's delete) goes out only
   * after `stuck` is released and the lock granted again (`race.next`): the delete, conditioned on the key
   * the break read, must not take the new grant.
   */
  const raceBreak = async () => {
    const prefix = freshPrefix()
    const users = locks(prefix)
    const stuck = await users.acquire('report')
    const raced = etcd()
    const race: { next?: Lock } = {}
    const txn = raced.kv.txn.bind(raced.kv)
    let armed = true
    raced.kv.txn = async (request) => {
      if (armed) {
        armed = false
        await stuck.release()
        race.next = await users.acquire('report')
      }
      return txn(request)
    }
    return { prefix, users, stuck, raced, race }
  }

  it('a break aimed at a fence leaves a grant made between its read and its delete', async () => {
    const { prefix, users, stuck, raced, race } = await raceBreak()
    const aimed = await breakLock(raced, prefix, 'report', { fence: stuck.fence })
    const next = race.next
    assert.ok(next)
    assert.equal(aimed.broken, false, 'the new grant is left alone')
    assert.equal(aimed.lease?.owner, next.owner)
    assert.equal(aimed.lease?.fence, next.fence)
    assert.equal(next.signal.aborted, false)
    assert.equal((await users.inspect('report')).owner, next.owner)
    await next.release()
  })

  it('a break with no fence that lost to a release leaves the grant that followed it', async () => {
    const { prefix, users, raced, race } = await raceBreak()
    // The break's next round reads the new grant, never the one it meant.
    const result = await breakLock(raced, prefix, 'report')
    const next = race.next
    assert.ok(next)
    assert.deepEqual([result.broken, result.lease?.fence], [false, next.fence])
    assert.equal(next.signal.aborted, false)
    assert.equal((await users.inspect('report')).owner, next.owner)
    await next.release()
  })

  it('a holder whose watch never reports the break finds its key gone at its next extend', async () => {
    const prefix = freshPrefix()
    // The holder's client watches nothing: every watch it makes stays silent.
    const deaf = etcd()
    const watch = deaf.watch.bind(deaf)
    deaf.watch = () => {
      const builder = watch()
      builder.watcher = () =>
        Object.assign(new EventEmitter(), { cancel: async () => {} }) as unknown as etcd3.Watcher
      return builder
    }
    const holder = locks(prefix, deaf, '20s')
    const lock = await holder.acquire('deaf')
    assert.equal((await locks(prefix).break('deaf')).broken, true)
    await assert.rejects(lock.extend(), LockLostError)
    assert.ok(lock.signal.aborted && lock.signal.reason instanceof LockLostError)
  })
})
