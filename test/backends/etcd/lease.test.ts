import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Etcd3 } from 'etcd3'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'
import { startProxy } from '../../support/proxy.js'
import { sleep } from '../../support/time.js'
import { abortedWithin, pollUntil } from '../../support/wait.js'

/**
 * What etcd keeps for a holder, against what the holder believes: an extension's validity is covered by
 * the lease etcd keeps (issue 11.1); a key deleted or a lease revoked behind the holder's back is noticed
 * when etcd knows, not at the next renewal (11.5); sessions without locks are retired (11.3).
 */
describe('etcd: leases and what the holder believes', { timeout: 120_000 }, () => {
  let cluster: EtcdCluster
  let admin: Etcd3
  const open: LockClient[] = []
  const client = (options: Parameters<typeof createLockClient>[1] = {}, url = cluster.url()) => {
    const c = createLockClient(url, options)
    open.push(c)
    return c
  }
  /** Our keys of lock `key`, as etcd has them. */
  const keysOf = async (key: string) => (await admin.getAll().prefix(`fencelock/${key}/`).exec()).kvs
  /** Every lease etcd has now, with the TTL it was granted. */
  const leases = async () => {
    const { leases: all } = await admin.leaseClient.leaseLeases({})
    const found = await Promise.all(
      all.map(async ({ ID }) => {
        // A lease revoked between the list and this read is simply not there any more.
        const ttl = await admin.leaseClient.leaseTimeToLive({ ID }).catch(() => undefined)
        return { id: ID, grantedTTL: Number(ttl?.grantedTTL ?? 0) }
      }),
    )
    return found.filter((l) => l.grantedTTL > 0)
  }
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

  it('after extend to a longer ttl, etcd keeps the key at least as long as the holder believes', async () => {
    // A lease short enough that 30 s is a move to a longer one, long enough for the extend to be answered
    // within it on a loaded machine.
    const locks = client({ ttl: '5s' })
    const lock = await locks.acquire('extend-ttl')
    await lock.extend('30s')
    const [kv] = await keysOf('extend-ttl')
    assert.ok(kv, 'our key is there')
    assert.equal(
      BigInt(kv.create_revision),
      lock.fence,
      'moving the key kept its create revision (the fence)',
    )
    const ttl = await admin.leaseClient.leaseTimeToLive({ ID: kv.lease })
    const believedMs = lock.validUntil - performance.now()
    // etcd reports whole seconds, rounded down: one second of slack for that alone.
    assert.ok(
      (Number(ttl.TTL) + 1) * 1000 >= believedMs,
      `etcd keeps the key ${ttl.TTL} s (lease of ${ttl.grantedTTL} s) but the holder believes ${Math.round(believedMs)} ms`,
    )
    assert.ok(believedMs > 20_000, `the extension was granted (${Math.round(believedMs)} ms believed)`)
    await lock.release()
    assert.equal((await keysOf('extend-ttl')).length, 0)
  })

  it('no one is granted the lock before the validity its holder believes after an extend, even when its keep-alives stop', async () => {
    const key = 'extend-partition'
    const proxy = await startProxy(cluster.members[0]!.clientPort)
    try {
      // The holder reaches etcd only through the proxy, so a partition stops its keep-alives and renewals.
      const holder = await client({ ttl: '2s' }, `etcd://127.0.0.1:${proxy.port}`).acquire(key)
      await holder.extend('12s')
      proxy.mode = 'blackhole'
      const partitionedAt = performance.now()
      const next = await client({ ttl: '2s' }).acquire(key, { timeout: '40s' })
      const grantedAt = performance.now()
      // No reply crosses the partition, so the holder's validUntil cannot have moved since; read it now.
      const believed = holder.validUntil
      assert.ok(
        grantedAt >= believed,
        `granted ${Math.round(grantedAt - partitionedAt)} ms into the partition, while the holder believed ` +
          `its lock valid until ${Math.round(believed - partitionedAt)} ms`,
      )
      assert.ok(next.fence > holder.fence)
      await next.release()
    } finally {
      await proxy.close()
    }
  })

  it("a key deleted behind the holder's back aborts lock.signal within a round trip, not at the next renewal", async () => {
    const lock = await client({ ttl: '30s' }).acquire('deleted')
    // Deleted at once, likely before the holder's watch is in place (it is made with the grant, not waited
    // for): the watch starts from the key's creation, so it hears of the delete all the same.
    const [kv] = await keysOf('deleted')
    assert.ok(kv)
    const deletedAt = performance.now()
    await admin.delete().key(kv.key).exec()
    // The renewal comes after ttl/3 = 10 s: far beyond this bound.
    const reason = await abortedWithin(lock.signal, 3000)
    assert.ok(reason instanceof LockLostError, `expected LockLostError, got ${reason}`)
    assert.match(reason.message, /deleted/)
    console.log(`# the holder heard of the delete after ${Math.round(performance.now() - deletedAt)} ms`)
    await lock.release()
  })

  it("a lease revoked behind the holder's back aborts lock.signal within a round trip", async () => {
    const lock = await client({ ttl: '30s' }).acquire('revoked-30s')
    // This time with the holder's watch in place.
    await sleep(300)
    const [kv] = await keysOf('revoked-30s')
    assert.ok(kv)
    const revokedAt = performance.now()
    await admin.leaseClient.leaseRevoke({ ID: kv.lease })
    // The session's keep-alive would hear of it within ttl/3 = 10 s; the watch on our key at once.
    const reason = await abortedWithin(lock.signal, 3000)
    console.log(`# the holder heard of the revoke after ${Math.round(performance.now() - revokedAt)} ms`)
    assert.ok(reason instanceof LockLostError, `expected LockLostError, got ${reason}`)
    assert.match(reason.message, /deleted|lease/)
    await lock.release()
  })

  it('our own release is not a loss, and every watch of a held key is cancelled', async () => {
    const locks = client({ ttl: '5s' })
    // The client's first lock opens its watch stream (and the idle watcher that keeps it open).
    const warmUp = await locks.acquire('watch-warm-up')
    await sleep(100)
    await warmUp.release()
    await sleep(300)
    const baseline = await watchers()
    for (let i = 0; i < 20; i++) {
      const lock = await locks.acquire(`watched-${i % 3}`)
      const signal = lock.signal
      // Half are released at once (the cancel may go out before the watch is even in place), half after
      // their watch is surely in place.
      if (i % 2 === 0) await sleep(100)
      await lock.release()
      assert.equal(signal.aborted, false, 'a normal release aborted lock.signal')
    }
    // Cancels are messages on the stream, not awaited by release: give them a moment.
    const now = await pollUntil(watchers, (n) => n <= baseline, { everyMs: 100 })
    assert.equal(now, baseline, `${now - baseline} watchers left behind by 20 released locks`)
  })

  it('a session without locks is retired; sessions with a holder or a waiter stay', async () => {
    const before = new Set((await leases()).map((l) => l.id))
    const locks = client()
    // Five sessions used once each (ttls 1..5 s), one with a holder (7 s), one with a waiter (8 s) in line
    // behind another client's holder.
    for (let s = 1; s <= 5; s++) await (await locks.acquire(`idle-${s}`, { ttl: `${s}s` })).release()
    const held = await locks.acquire('kept-held', { ttl: '7s' })
    const blocker = await client({ ttl: '30s' }).acquire('kept-waiting')
    const waiting = locks.acquire('kept-waiting', { ttl: '8s', timeout: '60s' })
    let waited = false
    waiting.then(
      () => {
        waited = true
      },
      () => {},
    )
    // In line once its key is under the lock's prefix, behind the blocker's.
    await pollUntil(
      () => keysOf('kept-waiting'),
      (keys) => keys.length >= 2,
      { withinMs: 10_000, everyMs: 20 },
    )
    const ours = async () => (await leases()).filter((l) => !before.has(l.id))
    const ttls = async () => new Set((await ours()).map((l) => l.grantedTTL))
    const used = await ttls()
    for (const s of [1, 2, 3, 4, 5, 7, 8, 30]) assert.ok(used.has(s), `no lease of ${s} s while in use`)
    // Idle for one ttl (at least 2 s) before it is retired: the 5 s one goes last. Generous bound.
    const idleGone = (left: Set<number>) => ![1, 2, 3, 4, 5].some((s) => left.has(s))
    const left = await pollUntil(ttls, idleGone, { withinMs: 15_000, everyMs: 100 })
    assert.deepEqual(
      [1, 2, 3, 4, 5].filter((s) => left.has(s)),
      [],
      'leases of sessions without locks are still there',
    )
    for (const s of [7, 8, 30]) assert.ok(left.has(s), `the lease of ${s} s was retired while in use`)
    assert.equal(held.signal.aborted, false)
    assert.equal(waited, false)
    // Still a working lock and a working line after the others were retired around them.
    await held.extend()
    await held.release()
    await blocker.release()
    const got = await waiting
    assert.ok(got.fence > blocker.fence)
    await got.release()
  })
})
