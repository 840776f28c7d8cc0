import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import type zookeeper from 'node-zookeeper-client'
import { zookeeperBackend } from '../../../src/backends/zookeeper/index.js'
import { segment, unsegment } from '../../../src/backends/zookeeper/layout.js'
import { breakLock, listLocks } from '../../../src/backends/zookeeper/operations.js'
import type { AcquireRequest, LockBackend } from '../../../src/core/backend.js'
import {
  createLockClient,
  type ListedLock,
  type Lock,
  type LockClient,
  LockLostError,
} from '../../../src/index.js'
import { connectAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { awaitLater } from '../../support/later.js'
import { abortedWithin } from '../../support/wait.js'

/**
 * ZooKeeper's list and break beyond the conformance case: more locks than one batch of reads, names with
 * odd characters (and the names ZooKeeper reserves: `.`, `..`) back exactly as given, a break while
 * waiters wait (the next in line is woken by its watch, not left to a poll), a fence-aimed break racing a
 * new grant, and a holder whose watch never reports the break learning of it at its next extend.
 */
describe('zookeeper: list and break', { timeout: 180_000 }, () => {
  let zk: ZooKeeperEnsemble
  const clients: zookeeper.Client[] = []
  const open: LockClient[] = []
  let run = 0
  /** A connected node-zookeeper-client, closed after the tests. */
  const connect = async () => {
    const client = await connectAdmin(zk.connectString, { sessionTimeout: 10_000 })
    clients.push(client)
    return client
  }
  const freshPrefix = () => `/ops-${process.pid}-${++run}`
  const locks = (prefix: string, ttl = '10s') => {
    const made = createLockClient(zk.url(prefix), { ttl })
    open.push(made)
    return made
  }
  const collect = async (list: AsyncIterable<ListedLock>) => {
    const found: ListedLock[] = []
    for await (const lock of list) found.push(lock)
    return found
  }
  const never = new AbortController().signal

  before(async () => {
    zk = await startZooKeeper(1)
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    for (const client of clients) client.close()
    await zk.destroy()
  })

  it('names decode to exactly the keys that made them; foreign names decode to none', () => {
    for (const key of ['dir/a b/ä', '100%', '%41', '.', '..', '...', '\u0001x', 'emoji 🙂', '']) {
      assert.equal(unsegment(segment(key)), key, JSON.stringify(key))
    }
    for (const name of ['50%', '%4', '%c3', '%2e', '%E2%82']) assert.equal(unsegment(name), undefined, name)
  })

  it('lists 250 held locks across batches (a waiter behind some), each once with its holder, and names as given', async () => {
    const prefix = freshPrefix()
    const holder = locks(prefix)
    const odd = ['dir/a b/ä', '100%', '.', '..', '\u0001x', 'emoji 🙂']
    const keys = [...Array.from({ length: 244 }, (_, i) => `job-${String(i).padStart(3, '0')}`), ...odd]
    const held = new Map<string, Lock>()
    for (const key of keys) held.set(key, await holder.acquire(key))
    const waiter = locks(prefix)
    const waits = keys
      .filter((_, i) => i % 10 === 0)
      .map((key) => awaitLater(waiter.acquire(key, { timeout: '60s' })))

    const client = await connect()
    for (const batch of [7, 64]) {
      const found = await collect(listLocks(client, prefix, '', never, batch))
      assert.deepEqual(found.map((lock) => lock.key).sort(), [...keys].sort(), `batches of ${batch}`)
      for (const lock of found) {
        assert.equal(lock.owner, held.get(lock.key)!.owner, `${lock.key}: the holder, not a waiter`)
        assert.equal(lock.fence, held.get(lock.key)!.fence, `${lock.key}: fence`)
      }
    }
    assert.equal((await collect(holder.list())).length, keys.length)
    assert.deepEqual((await collect(holder.list('.'))).map((lock) => lock.key).sort(), ['.', '..'])
    assert.deepEqual(
      (await collect(holder.list('dir/'))).map((lock) => lock.key),
      ['dir/a b/ä'],
    )
    for (const key of odd) {
      const broken = await holder.break(key, { fence: held.get(key)!.fence })
      assert.equal(broken.broken, true, `break ${JSON.stringify(key)}`)
    }
    for (const lock of held.values()) await lock.release().catch(() => {})
    for (const lock of await Promise.all(waits)) await lock.release()
    assert.deepEqual(await collect(holder.list()), [])
  })

  it('a break while waiters wait hands the lock to the next in line through its watch', async () => {
    const prefix = freshPrefix()
    const backend = zookeeperBackend({ client: await connect(), prefix }) as Required<LockBackend>
    const operator = zookeeperBackend({ client: await connect(), prefix }) as Required<LockBackend>
    try {
      const req = (owner: string): AcquireRequest => ({ key: 'jobs', owner, ttlMs: 10_000 })
      const first = await backend.tryAcquire(req('a'.repeat(32)), never)
      assert.ok(first.granted)
      assert.equal((await backend.tryAcquire(req('b'.repeat(32)), never)).granted, false)
      assert.equal((await backend.tryAcquire(req('c'.repeat(32)), never)).granted, false)
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

  it('a break aimed at a fence leaves a grant made between its read and its delete', async () => {
    const prefix = freshPrefix()
    const users = locks(prefix)
    const stuck = await users.acquire('report')
    const raced = await connect()
    let next: Lock | undefined
    // The break reads `stuck` as the holder; before its delete goes out, `stuck` is released and the
    // lock granted again: the delete of the node it read must not take the new grant.
    const remove = raced.remove.bind(raced) as (...args: unknown[]) => void
    let armed = true
    ;(raced as { remove: unknown }).remove = (...args: unknown[]) => {
      if (!armed) return remove(...args)
      armed = false
      void (async () => {
        await stuck.release()
        next = await users.acquire('report')
      })().finally(() => remove(...args))
    }
    const aimed = await breakLock(raced, prefix, 'report', { fence: stuck.fence })
    assert.ok(next)
    assert.equal(aimed.broken, false, 'the new grant is left alone')
    assert.equal(aimed.lease?.owner, next.owner)
    assert.equal(aimed.lease?.fence, next.fence)
    assert.equal(next.signal.aborted, false)
    assert.equal((await users.inspect('report')).owner, next.owner)
    await next.release()
  })

  it('a holder whose watch never reports the break finds its node gone at its next extend', async () => {
    const prefix = freshPrefix()
    // The holder's client sets no `exists` watch: the one a holder keeps on its own node stays silent.
    const deaf = await connect()
    const exists = deaf.exists.bind(deaf) as (...args: unknown[]) => void
    ;(deaf as { exists: unknown }).exists = (path: string, ...rest: unknown[]) =>
      rest.length === 2 ? exists(path, rest[1]) : exists(path, ...rest)
    const holder = createLockClient(zookeeperBackend({ client: deaf, prefix }), { ttl: '10s' })
    open.push(holder)
    const lock = await holder.acquire('deaf')
    assert.equal((await locks(prefix).break('deaf')).broken, true)
    await assert.rejects(lock.extend(), LockLostError)
    assert.ok(lock.signal.aborted && lock.signal.reason instanceof LockLostError)
  })
})
