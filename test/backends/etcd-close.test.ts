import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import * as etcd3 from 'etcd3'
import { etcdBackend, etcdClientOptions } from '../../src/backends/etcd/index.js'
import { createLockClient, type LockClient } from '../../src/index.js'
import { type EtcdCluster, startEtcd } from '../servers/etcd.js'
import { abortedWithin } from '../support/wait.js'

/**
 * The README's bound on `close()` while etcd does not answer (about 10 s: releases within etcd3's 5 s call
 * deadline, the core's 3 s for clean-ups, 2 s for the revokes), with room for a loaded machine. Without
 * a bound, close() waited for as long as the server stayed paused (633 s in a review).
 */
const CLOSE_WITHIN_MS = 20_000

/** How long `locks.close()` took, or a failure once it has taken longer than CLOSE_WITHIN_MS. */
async function closeTime(locks: LockClient): Promise<number> {
  const started = performance.now()
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), CLOSE_WITHIN_MS)
  })
  const closed = locks.close().then(() => 'closed' as const)
  closed.catch(() => {})
  const outcome = await Promise.race([closed, late])
  clearTimeout(timer)
  assert.equal(outcome, 'closed', `close() had not returned after ${CLOSE_WITHIN_MS} ms`)
  return performance.now() - started
}

describe('etcd: close() returns while etcd does not answer', { timeout: 180_000 }, () => {
  let cluster: EtcdCluster
  const clients: etcd3.Etcd3[] = []
  before(async () => {
    cluster = await startEtcd(1)
  })
  after(async () => {
    cluster.members[0]!.signal('SIGCONT')
    for (const c of clients) c.close()
    await cluster.destroy()
  })

  /** Pauses the server (SIGSTOP) for `during`, then resumes it. */
  async function paused<T>(during: () => Promise<T>): Promise<T> {
    const member = cluster.members[0]!
    member.signal('SIGSTOP')
    try {
      return await during()
    } finally {
      member.signal('SIGCONT')
    }
  }

  it('after a lock was lost to the pause (the client fromUrl makes)', async (t) => {
    const locks = createLockClient(cluster.url(), { ttl: '2s' })
    const lock = await locks.acquire('close-after-loss')
    await paused(async () => {
      await abortedWithin(lock.signal, 10_000)
      t.diagnostic(`close() took ${Math.round(await closeTime(locks))} ms`)
    })
  })

  it('with a lock held, an acquire waiting and an acquire under way (the client fromUrl makes)', async (t) => {
    const locks = createLockClient(cluster.url(), { ttl: '30s' })
    const held = await locks.acquire('close-while-held')
    const waiting = locks.acquire('close-while-held', { timeout: '60s' })
    waiting.catch(() => {})
    await paused(async () => {
      const pending = locks.acquire('close-while-acquiring', { timeout: '60s' })
      pending.catch(() => {})
      t.diagnostic(`close() took ${Math.round(await closeTime(locks))} ms`)
      assert.ok(held.signal.aborted, 'the holder was told its lock ended with the client')
      await assert.rejects(waiting)
      await assert.rejects(pending)
    })
  })

  it('after a lock was lost to the pause (your own client, built with etcdClientOptions)', async (t) => {
    const client = new etcd3.Etcd3(etcdClientOptions(etcd3, { hosts: cluster.endpoints }))
    clients.push(client)
    const locks = createLockClient(etcdBackend({ client }), { ttl: '2s' })
    const lock = await locks.acquire('close-own-client')
    await paused(async () => {
      await abortedWithin(lock.signal, 10_000)
      t.diagnostic(`close() took ${Math.round(await closeTime(locks))} ms`)
    })
    // Your client stays open and usable once etcd answers again.
    await client.put('after-close').value('1')
  })
})
