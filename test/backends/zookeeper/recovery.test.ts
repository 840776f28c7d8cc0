import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { inLine, lockPath, sortKey } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, type Lock, type LockClient } from '../../../src/index.js'
import { call, deleteAll, withAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { startProxy } from '../../support/proxy.js'
import { sleep } from '../../support/time.js'
import { abortedWithin, waitUntil } from '../../support/wait.js'

/**
 * A waiter that must find its way back to a free lock: its queue node deleted by an operator, its session
 * expired while it was cut off; and hand-overs on a server whose sessions are far shorter than the ttl.
 */
describe('zookeeper: waiters recover, hand-overs hold', { timeout: 180_000 }, () => {
  let zk: ZooKeeperEnsemble
  const open: LockClient[] = []
  const client = (options: Parameters<typeof createLockClient>[1] = {}, url = zk.url()) => {
    const c = createLockClient(url, options)
    open.push(c)
    return c
  }
  before(async () => {
    zk = await startZooKeeper(1)
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await zk.destroy()
  })

  const children = (path: string) =>
    withAdmin(zk.connectString, (admin) =>
      call<string[]>((done) => admin.getChildren(path, done)).catch(() => [] as string[]),
    )

  for (const what of ['the whole lock path', "the waiter's node only"]) {
    it(`a waiter whose queue node an operator deleted (${what}) enters the line again and gets the lock`, async () => {
      const key = `deleted-${what.length}`
      const holder = await client({ ttl: '10s' }).acquire(key)
      const waiting = client({ ttl: '10s' }).acquire(key, { timeout: '60s' })
      waiting.catch(() => {})
      await waitUntil(async () => (await children(lockPath(key))).length === 2, 'the waiter in line', {
        withinMs: 30_000,
      })
      // The waiter's node first (deleted before the holder's, it is never granted on the old one).
      const [, theirs] = inLine(await children(lockPath(key)))
      await withAdmin(zk.connectString, (admin) =>
        call((done) => admin.remove(`${lockPath(key)}/${theirs}`, -1, (error) => done(error, undefined))),
      )
      if (what === 'the whole lock path') {
        await withAdmin(zk.connectString, (admin) => deleteAll(admin, lockPath(key)))
        // The holder's node went too: it is told.
        await abortedWithin(holder.signal, 30_000)
      } else await holder.release()
      const next = await waiting
      assert.ok(next.fence > holder.fence, `${next.fence} > ${holder.fence}`)
      assert.equal(next.signal.aborted, false, `lost: ${next.signal.reason}`)
      await next.release()
      await holder.release()
    })
  }

  it('a waiter whose session expired while it was cut off gets the free lock once the network is back', async () => {
    const proxy = await startProxy(zk.members[0]!.clientPort)
    try {
      const holder = await client({ ttl: '30s' }).acquire('expired-waiter')
      const cutOff = client({ ttl: '1s' }, `zookeeper://127.0.0.1:${proxy.port}`)
      const waiting = cutOff.acquire('expired-waiter', { timeout: '90s' })
      waiting.catch(() => {})
      await waitUntil(
        async () => (await children(lockPath('expired-waiter'))).length === 2,
        'the waiter in line',
        { withinMs: 30_000 },
      )
      // Cut off (its reconnections hang too) for well over its 1 s session: the server expires it.
      proxy.mode = 'blackhole'
      proxy.cut()
      await waitUntil(
        async () => (await children(lockPath('expired-waiter'))).length === 1,
        "the server expiring the waiter's session",
        { withinMs: 30_000, everyMs: 100 },
      )
      await sleep(1500)
      await holder.release()
      proxy.mode = 'pass'
      proxy.cut()
      const next = await waiting
      assert.ok(next.fence > holder.fence, `${next.fence} > ${holder.fence}`)
      await next.release()
    } finally {
      await proxy.close()
    }
  })

  it('with a ttl far above the server’s longest session, hand-overs hold (no grant given back and queued again)', async () => {
    // Sessions of at most 1 s (5 ticks of 200 ms): a 10 s ttl asks 10 s and is granted 1 s.
    const short = await startZooKeeper(1, { maxSessionMs: 1000 })
    try {
      const [a, b] = [
        createLockClient(short.url(), { ttl: '10s' }),
        createLockClient(short.url(), { ttl: '10s' }),
      ]
      open.push(a, b)
      const key = 'long-ttl'
      let acquisitions = 0
      let held: Lock = await a.acquire(key)
      acquisitions++
      for (let round = 0; round < 10; round++) {
        const next = (round % 2 === 0 ? b : a).acquire(key, { timeout: '60s' })
        next.catch(() => {})
        // Held longer than a session (the waiter's session is kept alive by its keep-alives alone then),
        // for times that land the hand-over anywhere between two of them.
        await sleep(1400 + ((round * 397) % 1300))
        await held.release()
        held = await next
        acquisitions++
        assert.equal(held.signal.aborted, false)
      }
      await held.release()
      const made = await withAdmin(short.connectString, async (admin) => {
        const last = await a.acquire(key)
        const names = await call<string[]>((done) => admin.getChildren(lockPath(key), done))
        await last.release()
        return Number(sortKey(inLine(names).at(-1)!))
      })
      // One queue node per acquisition: a grant given back would have queued a node of its own again.
      assert.equal(made, acquisitions, `${made} queue nodes made for ${acquisitions} acquisitions`)
    } finally {
      await short.destroy()
    }
  })
})
