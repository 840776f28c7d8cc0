import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { fourLetterWord } from '../../../src/backends/zookeeper/four-letter.js'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { holderNode, withAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble, type ZooKeeperOptions } from '../../servers/zookeeper.js'
import { abortedWithin } from '../../support/wait.js'

/**
 * A holder connected to a follower that is cut off from the leader (the members' links blackholed, the
 * clients' links up): the follower answers reads alone until `syncLimit` ticks have passed, while the
 * leader expires the holder's session and grants the lock to a waiter on another member. The holder's
 * validity must end before that grant, and the holder must be told of its loss.
 */
describe('zookeeper: a holder on a follower cut off from the leader', { timeout: 600_000 }, () => {
  const open: LockClient[] = []
  const ensembles: ZooKeeperEnsemble[] = []
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await Promise.all(ensembles.map((e) => e.destroy()))
  })
  const client = (url: string, ttl: string) => {
    const c = createLockClient(url, { ttl })
    open.push(c)
    return c
  }

  /** The index of the member whose connection carries session `id` (`cons` lists each one's sessions). */
  async function memberOf(zk: ZooKeeperEnsemble, id: Buffer): Promise<number> {
    const sid = `sid=0x${BigInt(`0x${id.toString('hex')}`).toString(16)}`
    for (const [index, m] of zk.members.entries()) {
      const cons = await fourLetterWord('127.0.0.1', m.clientPort, 'cons', AbortSignal.timeout(5000))
      if (cons.includes(sid)) return index
    }
    throw new Error(`no member carries session ${sid}`)
  }

  /** A lock on `key` held through `url` by a session on a follower (new clients until one lands there). */
  async function holdOnFollower(zk: ZooKeeperEnsemble, url: string, key: string, ttl: string) {
    const leader = zk.members.indexOf(await zk.leader())
    for (let tries = 0; tries < 20; tries++) {
      const locks = client(url, ttl)
      const lock = await locks.acquire(key, { timeout: '30s' })
      const node = await withAdmin(zk.connectString, (admin) => holderNode(admin, key))
      const member = await memberOf(zk, node!.session)
      if (member !== leader) return { lock, member, leader }
      await lock.release()
      await locks.close()
    }
    throw new Error('no session landed on a follower in 20 tries')
  }

  /**
   * Isolates the holder's follower while a waiter on another member waits; returns when both are over.
   * Every validity the holder believed in is recorded (polled), and compared with the waiter's grant.
   */
  async function partitionDuringHold(
    zk: ZooKeeperEnsemble,
    urlOf: (follower: number) => string,
    ttl: string,
  ) {
    const key = `cut-${ensembles.length}-${open.length}`
    const all = zk.url()
    const {
      lock: held,
      member,
      leader,
    } = await holdOnFollower(zk, all, key, ttl).then(async (first) => {
      // The holder's URL: the member it landed on alone, or every member.
      if (urlOf(first.member) === all) return first
      await first.lock.release()
      const lock = await client(urlOf(first.member), ttl).acquire(key, { timeout: '30s' })
      return { ...first, lock }
    })
    const other = [0, 1, 2].find((i) => i !== member && i !== leader) ?? leader
    const waiting = client(`zookeeper://${zk.members[other]!.endpoint}`, ttl).acquire(key, {
      timeout: '120s',
    })
    waiting.catch(() => {})
    let believed = held.validUntil
    const poll = setInterval(() => {
      if (!held.signal.aborted) believed = Math.max(believed, held.validUntil)
    }, 10)
    const heal = zk.isolate(member)
    try {
      const next = await waiting
      const grantedAt = performance.now()
      if (!held.signal.aborted) believed = Math.max(believed, held.validUntil)
      clearInterval(poll)
      assert.ok(
        believed <= grantedAt,
        `the holder believed in its lock until ${Math.round(believed - grantedAt)} ms after the waiter's grant`,
      )
      // Told of its loss (by its validity running out, or the session's expiry once it reconnects).
      await abortedWithin(held.signal, 60_000)
      assert.ok(held.signal.reason instanceof LockLostError, `aborted with ${held.signal.reason}`)
      assert.ok(next.fence > held.fence)
      await next.release()
    } finally {
      clearInterval(poll)
      await heal()
      await zk.serving(120_000)
    }
  }

  async function ensemble(options: ZooKeeperOptions = {}) {
    const zk = await startZooKeeper(3, { partitionable: true, ...options })
    ensembles.push(zk)
    return zk
  }

  it('test settings (tick 200 ms, syncLimit 10): the holder URL lists its follower only, then every member', async () => {
    const zk = await ensemble()
    await partitionDuringHold(zk, (follower) => `zookeeper://${zk.members[follower]!.endpoint}`, '2s')
    await partitionDuringHold(zk, () => zk.url(), '2s')
  })

  it("ZooKeeper's sample settings (tickTime 2000, syncLimit 5): the holder URL lists its follower only", async () => {
    const zk = await ensemble({ tickMs: 2000, syncLimit: 5 })
    await partitionDuringHold(zk, (follower) => `zookeeper://${zk.members[follower]!.endpoint}`, '4s')
  })
})
