import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { lockPath } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { call, expireSession, holderNode, withAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { startHold } from '../../support/processes.js'
import { startProxy } from '../../support/proxy.js'
import { abortedWithin, waitUntil } from '../../support/wait.js'

/**
 * ZooKeeper under faults, on one 3-member ensemble: leader kills (while held and while waiting), sessions
 * expired on purpose, a holder process paused past its session timeout, a client cut off by a partition.
 * Fences are czxids: they must keep increasing through all of it.
 */
describe(
  'zookeeper: leader kills, session expiry, a paused holder, a partition',
  { timeout: 120_000 },
  () => {
    let zk: ZooKeeperEnsemble
    const open: LockClient[] = []
    const client = (options: Parameters<typeof createLockClient>[1] = {}, url = zk.url()) => {
      const c = createLockClient(url, options)
      open.push(c)
      return c
    }
    before(async () => {
      zk = await startZooKeeper(3)
    })
    after(async () => {
      await Promise.all(open.map((c) => c.close()))
      await zk.destroy()
    })

    it('kills the leader while a lock is held and another waits: the lock goes on, fences increase', async () => {
      const [a, b] = [client({ ttl: '6s' }), client({ ttl: '6s' })]
      const held = await a.acquire('leader')
      const waiting = b.acquire('leader', { timeout: '60s' })
      waiting.catch(() => {})
      const leader = await zk.leader()
      leader.signal('SIGKILL')
      const next = await zk.leader()
      assert.notEqual(next, leader)
      // Sessions outlive a leader change: the holder keeps its lock, the waiter its place.
      assert.equal(held.signal.aborted, false, `lost: ${held.signal.reason}`)
      await held.release()
      const second = await waiting
      assert.ok(second.fence > held.fence, `${second.fence} > ${held.fence}`)
      // And again while held: the leader that is killed now is the new one; the old one comes back.
      await leader.restart()
      ;(await zk.leader()).signal('SIGKILL')
      // A request in flight on a connection to the killed member fails (connection loss); one sent once
      // the client reconnected goes through.
      await zk.leader()
      await second.release()
      const third = await a.acquire('leader', { timeout: '60s' })
      assert.ok(third.fence > second.fence)
      // Created under a new leader: a zxid's high 32 bits are the epoch, above every earlier leader's.
      assert.ok(third.fence >> 32n > held.fence >> 32n, 'the fence carries the new epoch')
      await third.release()
      for (const m of zk.members) if ((await m.mode()) === undefined) await m.restart()
      await zk.serving()
    })

    it('expires the holder session on purpose: its signal aborts with LockLostError, the waiter gets the lock', async () => {
      const [a, b] = [client({ ttl: '60s' }), client({ ttl: '60s' })]
      const held = await a.acquire('expire')
      const waiting = b.acquire('expire', { timeout: '30s' })
      waiting.catch(() => {})
      const holder = await withAdmin(zk.connectString, (admin) => holderNode(admin, 'expire'))
      assert.ok(holder, 'the holder has a node')
      await expireSession(zk.connectString, holder.session)
      await abortedWithin(held.signal, 10_000)
      assert.ok(held.signal.reason instanceof LockLostError, `aborted with ${held.signal.reason}`)
      const next = await waiting
      assert.ok(next.fence > held.fence, `${next.fence} > ${held.fence}`)
      // The lost holder's release is a no-op (its node went with its session): the next one keeps the lock.
      await held.release()
      assert.equal((await b.inspect('expire')).owner, next.owner)
      await next.release()
    })

    it('fences increase after the lock node is deleted and created again (its sequence numbers restart)', async () => {
      const locks = client({ ttl: '5s' })
      const first = await locks.acquire('recreated')
      await first.release()
      const path = lockPath('recreated')
      await withAdmin(zk.connectString, (admin) =>
        call((done) => admin.remove(path, -1, (error) => done(error, undefined))),
      )
      const second = await locks.acquire('recreated')
      const node = await withAdmin(zk.connectString, (admin) => holderNode(admin, 'recreated'))
      assert.match(node!.path, /-lock-0000000000$/, 'a new lock node numbers from 0 again')
      assert.ok(second.fence > first.fence, `${second.fence} > ${first.fence}`)
      await second.release()
    })

    it('a holder process paused past its session timeout learns on resuming that it lost the lock', async () => {
      const hold = startHold(zk.url(), 'paused', ['--ttl', '1s'])
      try {
        const acquired = await hold.next('acquired')
        hold.child.kill('SIGSTOP')
        // The server expires the paused holder's session (1 s) and deletes its node: the other gets the lock.
        const other = await client({ ttl: '5s' }).acquire('paused', { timeout: '30s' })
        assert.ok(other.fence > BigInt(acquired.fence as string), `${other.fence} > ${acquired.fence}`)
        hold.child.kill('SIGCONT')
        const lost = await hold.next('lost', 30_000)
        assert.equal(lost.fence, acquired.fence)
        assert.equal(
          (await client().inspect('paused')).owner,
          other.owner,
          'the resumed holder took nothing back',
        )
        await other.release()
      } finally {
        hold.child.kill('SIGCONT')
        hold.child.kill('SIGKILL')
      }
    })

    it('a client cut off by a partition loses its lock by its validity; the others get it with a higher fence', async () => {
      const proxies = await Promise.all(zk.members.map((m) => startProxy(m.clientPort)))
      try {
        const cut = client(
          { ttl: '2s' },
          `zookeeper://${proxies.map((p) => `127.0.0.1:${p.port}`).join(',')}`,
        )
        const held = await cut.acquire('partition')
        for (const p of proxies) p.mode = 'blackhole'
        // Nothing answers: no keep-alive is acknowledged, and the validity runs out on the client's own clock.
        await abortedWithin(held.signal, 15_000)
        assert.ok(held.signal.reason instanceof LockLostError, `aborted with ${held.signal.reason}`)
        // Meanwhile the server expired the session: the lock is free for the others.
        const other = await client({ ttl: '5s' }).acquire('partition', { timeout: '30s' })
        assert.ok(other.fence > held.fence)
        await other.release()
        // Healed, the cut-off client takes locks again (a new session).
        for (const p of proxies) {
          p.mode = 'pass'
          p.cut()
        }
        let again: Awaited<ReturnType<typeof cut.acquire>> | undefined
        await waitUntil(
          async () => {
            again = await cut.acquire('partition', { timeout: '5s' })
            return true
          },
          'the healed client to take the lock again',
          { withinMs: 30_000, everyMs: 200 },
        )
        assert.ok(again!.fence > other.fence)
        await again!.release()
      } finally {
        await Promise.all(proxies.map((p) => p.close()))
      }
    })
  },
)
