/**
 * Slots semaphores (`layout: 'slots'`), on every backend: built in the core over the mutex and the listing,
 * so every kit runs them. Never more than `limit` slots held, each permit's fence its slot's real fence
 * (increasing per slot, admitted by a fence guard), `permits: k` all or nothing, a holder that stops
 * renewing freeing its slot after its lease, another limit refused, and the view `inspect` gives. Few
 * cases, ttls at the kit's minimum: the conditional-write stores are the slowest of the suite.
 */
import assert from 'node:assert/strict'
import { memoryFenceStore } from '../../../../src/guards/fence-store.js'
import {
  CapabilityError,
  LimitMismatchError,
  type LockClient,
  LockLostError,
  LockNotAcquiredError,
} from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import { pollUntil } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

/** The generous bound of every wait: a liveness limit on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

const slots = (client: LockClient, name: string, limit: number) =>
  client.semaphore(name, { limit, layout: 'slots' })

export const slotsCases: ConformanceCase[] = [
  {
    name: 'slots: never more than `limit` held; each fence is its slot’s, increasing and admitted by a guard',
    async run(ctx) {
      const name = ctx.key('slots-limit')
      const limit = 2
      const clients = [0, 1, 2].map(() => ctx.client({ ttl: '20s' }))
      const guard = memoryFenceStore()
      const inside = new Set<string>()
      const first = new Map<string, bigint>()
      const last = new Map<string, bigint>()
      let most = 0
      const worker = async (client: LockClient, permits: number) => {
        for (let round = 0; round < 3; round++) {
          const held = await slots(client, name, limit).acquire({ permits, timeout: '120s' })
          assert.equal(held.slots.length, permits)
          assert.equal(held.fence, held.slots[0]!.fence)
          assert.deepEqual(
            held.fences,
            held.slots.map((slot) => slot.fence),
          )
          for (const slot of held.slots) {
            assert.ok(!inside.has(slot.key), `slot ${JSON.stringify(slot.key)} held twice at once`)
            inside.add(slot.key)
            const before = last.get(slot.key)
            assert.ok(before === undefined || slot.fence > before, `fence ${slot.fence} after ${before}`)
            last.set(slot.key, slot.fence)
            if (!first.has(slot.key)) first.set(slot.key, slot.fence)
            assert.equal(await guard.advance(slot.key, slot.fence), slot.fence, 'the guard admits it')
          }
          most = Math.max(most, inside.size)
          assert.ok(inside.size <= limit, `${inside.size} slots held at once, limit ${limit}`)
          await sleep(5)
          for (const slot of held.slots) inside.delete(slot.key)
          await held.release()
        }
      }
      await Promise.all(clients.map((client, i) => worker(client, i === 2 ? 2 : 1)))
      assert.equal(first.size, limit, 'every slot was used')
      // A slot's earlier holder, late, is refused by the guard its successors passed.
      const reused = [...first].find(([key, fence]) => last.get(key)! > fence)
      assert.ok(reused, 'a slot was granted twice')
      assert.ok((await guard.advance(reused[0], reused[1])) > reused[1], 'a stale fence is refused')
    },
  },

  {
    name: 'slots: permits are taken all or none, inspect shows each slot, an acquire given up leaves nothing',
    async run(ctx) {
      const name = ctx.key('slots-all')
      const [a, b, c] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const two = await slots(a, name, 3).acquire({ permits: 2 })
      assert.equal(await slots(b, name, 3).tryAcquire({ permits: 2 }), null)
      // The refused request left nothing behind: the one free slot is there to take.
      const one = await slots(c, name, 3).tryAcquire()
      assert.ok(one, 'one slot was free')
      const view = await slots(a, name, 3).inspect()
      assert.deepEqual([view.limit, view.held, view.available, view.slots.length], [3, 3, 0, 3])
      assert.deepEqual(
        view.slots.map((slot) => slot.held),
        [true, true, true],
      )
      // Each holder's own view shows its fences exactly (on Redlock another client's view of a fence is the
      // counter most nodes show, whose low bits may name another node).
      const fences = new Map(view.slots.map((slot) => [slot.key, slot.fence]))
      for (const lock of two.slots) assert.equal(fences.get(lock.key), lock.fence)
      const fencesOfC = new Map(
        (await slots(c, name, 3).inspect()).slots.map((slot) => [slot.key, slot.fence]),
      )
      for (const lock of one.slots) assert.equal(fencesOfC.get(lock.key), lock.fence)
      assert.equal(view.holders.filter((h) => h.isMe).length, 2, 'two of the slots are this client’s')
      await assert.rejects(
        slots(b, name, 3).acquire({ permits: 2, timeout: ctx.ttl(1) }),
        LockNotAcquiredError,
      )
      const both = awaitLater(slots(b, name, 3).acquire({ permits: 2, timeout: '60s' }))
      await two.release()
      const granted = await both
      assert.equal(granted.permits, 2)
      await granted.release()
      await one.release()
      const after = await pollUntil(
        () => slots(a, name, 3).inspect(),
        (v) => v.held === 0,
        WITHIN,
      )
      assert.equal(after.available, 3)
    },
  },

  {
    name: 'slots: a holder that stops renewing frees its slot when its lease ends, and learns it',
    async run(ctx) {
      const name = ctx.key('slots-expiry')
      const lease = ctx.ttl(3)
      const [a, b] = [ctx.client({ ttl: lease, renew: false }), ctx.client({ ttl: '20s' })]
      const stale = await slots(a, name, 1).acquire()
      const next = await slots(b, name, 1).acquire({ timeout: '60s' })
      assert.equal(next.slots[0]!.key, stale.slots[0]!.key, 'the same slot')
      assert.ok(next.fence > stale.fence, `fence ${next.fence} after ${stale.fence}`)
      await assert.rejects(stale.extend(), LockLostError)
      assert.ok(stale.signal.aborted)
      await next.release()
    },
  },

  {
    name: 'slots: another limit is refused while a slot is held; bad layouts, permits and keys before any I/O',
    async run(ctx) {
      const name = ctx.key('slots-mismatch')
      const [a, b] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const held = await slots(a, name, 1).acquire()
      await assert.rejects(slots(b, name, 2).acquire({ timeout: '5s' }), (error: unknown) => {
        assert.ok(error instanceof LimitMismatchError, `expected a LimitMismatchError, got ${error}`)
        assert.deepEqual([error.storedLimit, error.requestedLimit, error.key], [1, 2, name])
        return true
      })
      await assert.rejects(slots(a, name, 1).setLimit(2), CapabilityError)
      await held.release()
      // With no slot held, another limit opens it (a wait only for a slow store: nothing holds it).
      const reopened = await slots(b, name, 2).acquire({ permits: 2, timeout: '30s' })
      await reopened.release()
      assert.throws(
        () => a.semaphore(name, { limit: 2, layout: 'slot' as never }),
        /'counting' or 'slots', got "slot"/,
      )
      await assert.rejects(slots(a, name, 2).acquire({ permits: 3 }), /its limit is 2/)
      await assert.rejects(a.acquire(`${name}\uFFFF2\uFFFF0`), /U\+FFFF/)
    },
  },
  {
    name: 'slots: a dead holder of another limit stops refusing once its lease is over',
    async run(ctx) {
      const name = ctx.key('slots-dead-other-limit')
      const lease = ctx.ttl(2)
      // A client of the old limit takes a slot and dies (never renews, never releases).
      // Its backend never releases: the process is gone (no clean-up at its local expiry either).
      const dead = await ctx.backend()
      // Methods bound to the backend itself: a class backend's private fields are not reachable through a proxy.
      const gone = new Proxy(dead, {
        get: (target, prop) => {
          if (prop === 'release' || prop === 'abandon') return async () => false
          const value = Reflect.get(target, prop, target)
          return typeof value === 'function' ? value.bind(target) : value
        },
      })
      const old = ctx.client({ ttl: lease, renew: false }, gone)
      const taken = await slots(old, name, 2).acquire()
      // Where leases live on a session, a dead process's session ends too: this client's would live on.
      if (ctx.kit.capabilities.session) await ctx.store().loseSession!(taken.slots[0]!.key)
      await sleep(lease * 2)
      // Long after its lease: the new limit must be usable (on every store, as a dead holder of the same
      // limit is taken over).
      const b = ctx.client({ ttl: '20s' })
      let refusals = 0
      const held = await pollUntil(
        async () => {
          try {
            return await slots(b, name, 1).acquire({ timeout: '5s' })
          } catch (error) {
            if (!(error instanceof LimitMismatchError)) throw error
            refusals++
            return undefined
          }
        },
        (h) => h !== undefined,
        WITHIN,
      )
      assert.ok(held, `still refused after ${refusals} tries`)
      await held.release()
    },
  },
]
