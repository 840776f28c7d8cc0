import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Etcd3 } from 'etcd3'
import { lockPrefix } from '../../../src/backends/etcd/layout.js'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { startEtcdStore } from '../../kits/etcd.js'
import type { KitStore } from '../../kits/kit.js'
import { abortedWithin, pollUntil } from '../../support/wait.js'

/**
 * The etcd kit's chaos hooks on a three-member cluster, under both raft timings (a fast one, and etcd's
 * defaults): a member cut off from the others while the clients' links stay up (`isolateMember`), the
 * leader's index (`leaderIndex`), and an operator deleting lock state (`deleteState`).
 *
 * A holder whose client reaches only the cut-off member must learn that its lock is gone before a waiter
 * on the majority's side is granted: its validity counts only keep-alives the leader answered (a follower
 * forwards them to the leader; a cut-off leader steps down within an election timeout, and the new leader
 * extends every lease by one when it takes over), never a read the cut-off member serves alone.
 */
for (const raft of ['fast', 'defaults'] as const) {
  describe(`etcd: partitions and deleted state (raft timing: ${raft})`, { timeout: 300_000 }, () => {
    let store: KitStore
    let admin: Etcd3
    const open: LockClient[] = []
    const client = (url: string) => {
      const c = createLockClient(url, { ttl: '3s' })
      open.push(c)
      return c
    }
    /** Until `count` keys are in `key`'s line. */
    const inLine = (key: string, count: number) =>
      pollUntil(
        async () => (await admin.getAll().prefix(lockPrefix(key)).keys()).length,
        (n) => n === count,
        { withinMs: 10_000, everyMs: 20 },
      )
    before(async () => {
      store = await startEtcdStore(3, { raft })
      admin = new Etcd3({ hosts: store.ports.map((p) => `http://127.0.0.1:${p}`) })
    })
    after(async () => {
      await Promise.all(open.map((c) => c.close()))
      admin.close()
      await store.close()
    })

    it('leaderIndex names the member that leads', async () => {
      const index = await store.leaderIndex!()
      const status = (await fetch(`http://127.0.0.1:${store.ports[index]}/v3/maintenance/status`, {
        method: 'POST',
        body: '{}',
      }).then((r) => r.json())) as { header: { member_id: string }; leader: string }
      assert.equal(status.header.member_id, status.leader)
    })

    for (const which of ['follower', 'leader'] as const) {
      it(`a holder reaching only a ${which} that is cut off loses its lock before a waiter on the majority side is granted`, async (t) => {
        const leader = await store.leaderIndex!()
        const cut = which === 'leader' ? leader : (leader + 1) % store.ports.length
        const majority = store.ports.filter((_, i) => i !== cut)
        const key = `cut-off-${which}`
        const held = await client(store.urlVia!([store.ports[cut]!])).acquire(key)
        const waiting = client(store.urlVia!(majority)).acquire(key, { timeout: '60s' })
        const granted = waiting.then(
          (lock) => ({ lock, at: performance.now(), holderValidUntil: held.validUntil }),
          (error: unknown) => ({ error }),
        )
        await inLine(key, 2)
        const heal = await store.isolateMember!(cut)
        try {
          const outcome = await granted
          assert.ok('lock' in outcome, `the waiter was not granted: ${'error' in outcome && outcome.error}`)
          assert.ok(
            outcome.holderValidUntil <= outcome.at,
            `two holders: the cut-off holder counted ${Math.round(outcome.holderValidUntil - outcome.at)} ms ` +
              "of validity beyond the waiter's grant",
          )
          t.diagnostic(
            `the holder's validity ended ${Math.round(outcome.at - outcome.holderValidUntil)} ms before the grant`,
          )
          // Its validity (above) is what the holder goes by; the lost signal follows from it (its timer may
          // run a moment late on a busy event loop, so it is not compared with the grant's time).
          assert.ok((await abortedWithin(held.signal, 10_000)) instanceof LockLostError)
          assert.ok(outcome.lock.fence > held.fence)
          await outcome.lock.release()
        } finally {
          await heal()
        }
      })
    }

    it("deleteState: an operator deleting a lock's keys, then the whole prefix; fences go on rising", async () => {
      const locks = client(store.url())
      const a = await locks.acquire('state-a')
      const b = await locks.acquire('state-b')
      const waiting = client(store.url()).acquire('state-a', { timeout: '30s' })
      waiting.catch(() => {})
      await inLine('state-a', 2)
      // The holder's key and the waiter's both go: the holder hears of it, the waiter enters the line again.
      await store.deleteState!('state-a')
      assert.ok((await abortedWithin(a.signal, 10_000)) instanceof LockLostError)
      const next = await waiting
      assert.ok(next.fence > a.fence)
      assert.equal(b.signal.aborted, false, "another lock's keys were deleted")
      await store.deleteState!()
      await abortedWithin(b.signal, 10_000)
      await abortedWithin(next.signal, 10_000)
      const again = await locks.acquire('state-b', { timeout: '10s' })
      assert.ok(again.fence > next.fence && again.fence > b.fence)
      await again.release()
    })
  })
}
