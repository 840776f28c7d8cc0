import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { lockPath } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import type { KitStore } from '../../kits/kit.js'
import { call, withAdmin, zookeeperKit3 } from '../../kits/zookeeper.js'
import { modeOf } from '../../servers/zookeeper.js'
import { abortedWithin, waitUntil } from '../../support/wait.js'

/** The 3-member ZooKeeper kit's hooks for the chaos nemeses: leaderIndex, isolateMember, deleteState. */
describe('zookeeper kit hooks', { timeout: 300_000 }, () => {
  let store: KitStore
  const open: LockClient[] = []
  before(async () => {
    store = await zookeeperKit3.start()
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await store.close()
  })
  const locks = () => {
    const c = createLockClient(store.url(), { ttl: '5s' })
    open.push(c)
    return c
  }
  const exists = (path: string) =>
    withAdmin(store.ports.map((p) => `127.0.0.1:${p}`).join(','), async (admin) =>
      Boolean(await call<unknown>((done) => admin.exists(path, done))),
    )

  it('leaderIndex names the member that says it leads; isolateMember takes a member out of the quorum and back', async () => {
    const leader = await store.leaderIndex!()
    assert.equal(await modeOf(store.ports[leader]!), 'leader')
    const follower = (leader + 1) % store.ports.length
    const heal = await store.isolateMember!(follower)
    try {
      // Cut off from the leader, it stops serving once its syncLimit has passed; the others go on.
      await waitUntil(
        async () => (await modeOf(store.ports[follower]!)) === undefined,
        'the isolated member to stop serving',
        {
          withinMs: 60_000,
          everyMs: 100,
        },
      )
      const lock = await locks().acquire('hooks-isolated', { timeout: '30s' })
      await lock.release()
    } finally {
      await heal()
    }
    await waitUntil(
      async () => (await modeOf(store.ports[follower]!)) !== undefined,
      'the healed member to serve',
      {
        withinMs: 120_000,
        everyMs: 200,
      },
    )
  })

  it("deleteState deletes a key's queue (its holder is told), or every lock under the prefix", async () => {
    const held = await locks().acquire('hooks-deleted')
    await store.deleteState!('hooks-deleted')
    await abortedWithin(held.signal, 30_000)
    assert.equal(await exists(lockPath('hooks-deleted')), false)
    const again = await locks().acquire('hooks-deleted', { timeout: '30s' })
    assert.ok(again.fence > held.fence)
    await again.release()
    await store.deleteState!()
    assert.equal(await exists('/fencelock'), false)
  })
})
