/**
 * Atomic multi-key locks (`acquireAll(keys, { atomic: true })`), on the kits whose backend takes a set of
 * keys in one step of the store: nothing is held while a key is awaited, every key is granted at once when
 * all are free, each with its own fence above the key's earlier grants; overlapping sets in opposite orders
 * never deadlock; a lost reply is taken as granted by the next attempt, and an acquisition that gives up
 * after one leaves nothing held. All through the public API.
 */
import assert from 'node:assert/strict'
import {
  BackendUnavailableError,
  type LockBackend,
  type LockClient,
  LockNotAcquiredError,
  type MultiKeyFacet,
} from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import { pollUntil } from '../../../support/wait.js'
import type { CaseContext, ConformanceCase } from '../../harness.js'
import { crossingSets } from './index.js'

/** The generous bound of every wait: a liveness limit on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

/** A lease far longer than any wait below: "free" can only mean "released", not "expired". */
const LONG_TTL = '120s'

const ATOMIC = { atomic: true } as const

/** Whether no key of `keys` is held (by anyone), read without taking anything. */
async function noneHeld(client: LockClient, keys: readonly string[]): Promise<boolean> {
  const infos = await Promise.all(keys.map((key) => client.inspect(key)))
  return infos.every((info) => !info.held)
}

/** Whether every key of `keys` can be taken at once by a client of its own (which gives them back). */
async function allFree(ctx: CaseContext, keys: readonly string[]): Promise<boolean> {
  const probe = ctx.client()
  return pollUntil(
    async () => {
      const all = await probe.tryAcquireAll(keys, ATOMIC).catch((error: unknown) => {
        if (error instanceof BackendUnavailableError) return null
        throw error
      })
      await all?.release()
      return all !== null
    },
    Boolean,
    WITHIN,
  )
}

/**
 * `backend` whose atomic step loses its reply: the store takes the keys (or refuses them), the caller hears
 * a failure. `lose(n)` says whether the n-th attempt's reply is lost.
 */
function losingReplies(backend: LockBackend, lose: (attempt: number) => boolean): LockBackend {
  const facet = backend.multiKey!
  let attempts = 0
  const lossy: MultiKeyFacet = {
    ...(facet.refusal ? { refusal: (keys) => facet.refusal!(keys) } : {}),
    ...(facet.waitForChange
      ? { waitForChange: (requests, signal) => facet.waitForChange!(requests, signal) }
      : {}),
    async tryAcquireAll(requests, signal) {
      const result = await facet.tryAcquireAll(requests, signal)
      if (lose(++attempts)) throw new Error('connection reset (the reply was lost)')
      return result
    },
  }
  return new Proxy(backend, {
    get(target, name) {
      if (name === 'multiKey') return lossy
      const value = Reflect.get(target, name, target)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

export const atomicMultiKeyCases: ConformanceCase[] = [
  {
    name: 'multikey-atomic: holds no key while one is held elsewhere, then takes all at once with fresh fences',
    async run(ctx) {
      const base = ctx.key('all-at-once')
      const keys = [`${base}:1`, `${base}:2`, `${base}:3`]
      const [a, b, observer] = [ctx.client({ ttl: LONG_TTL }), ctx.client({ ttl: LONG_TTL }), ctx.client()]
      const earlier = await b.acquire(keys[0]!)
      await earlier.release()
      const held = await b.acquire(keys[1]!)
      assert.equal(await a.tryAcquireAll(keys, ATOMIC), null, 'tryAcquireAll resolves null')
      assert.ok(await noneHeld(observer, [keys[0]!, keys[2]!]), 'the refused attempt took nothing')
      const pending = awaitLater(a.acquireAll(keys, { ...ATOMIC, timeout: '120s' }))
      // While it waits, the free keys stay free: another client takes and gives back each of them.
      for (let round = 0; round < 3; round++) {
        for (const key of [keys[0]!, keys[2]!]) {
          const other = await observer.tryAcquire(key)
          assert.ok(other, `${key} is free while the atomic acquisition waits for ${keys[1]}`)
          await other.release()
        }
        await sleep(ctx.ttl(0.1))
      }
      await held.release()
      const all = await pending
      assert.deepEqual(all.keys, keys)
      for (const key of keys) {
        const lock = all.locks.get(key)!
        assert.equal((await observer.inspect(key)).owner, lock.owner, `${key} is held by its own lock`)
        assert.equal(all.fences.get(key), lock.fence)
      }
      assert.ok(all.fences.get(keys[0]!)! > earlier.fence, 'a fence greater than the earlier grant')
      assert.ok(all.fences.get(keys[1]!)! > held.fence, 'a fence greater than the holder it waited for')
      assert.deepEqual(await all.release(), [], 'every key was still held at the release')
      const after = await b.acquire(keys[2]!)
      assert.ok(after.fence > all.fences.get(keys[2]!)!, 'a later single grant has a greater fence')
      await after.release()
      assert.ok(await allFree(ctx, keys), 'the release freed every key')
    },
  },

  {
    name: 'multikey-atomic: a key held elsewhere times the acquire out with nothing taken',
    async run(ctx) {
      const base = ctx.key('timeout')
      const keys = [`${base}:1`, `${base}:2`]
      const [a, b] = [ctx.client({ ttl: LONG_TTL }), ctx.client({ ttl: LONG_TTL })]
      const held = await b.acquire(keys[1]!)
      const error = await a.acquireAll(keys, { ...ATOMIC, timeout: ctx.ttl(2) }).then(
        () => assert.fail('acquired a key held elsewhere'),
        (e: unknown) => e,
      )
      assert.ok(error instanceof LockNotAcquiredError, `got ${error}`)
      assert.match(error.message, /one atomic step/)
      assert.match(error.message, /no key was taken/)
      assert.ok(await noneHeld(ctx.client(), [keys[0]!]), 'nothing was taken')
      await held.release()
    },
  },

  {
    name: 'multikey-atomic: overlapping key sets asked in opposite and cyclic orders never deadlock',
    run: (ctx) => crossingSets(ctx, ATOMIC),
  },

  {
    name: 'multikey-atomic: sequential and atomic sets over the same keys, repeated, never deadlock',
    async run(ctx) {
      // A set that kept entries waiting in lines would deadlock with a sequential one: the sequential
      // holding x and queued on y behind the atomic set's entry, the atomic set queued on x behind it.
      const base = ctx.key('mixed')
      const [x, y, z] = [`${base}:x`, `${base}:y`, `${base}:z`]
      const workers = [
        { keys: [x, y, z], atomic: false },
        { keys: [z, y, x], atomic: true },
        { keys: [y, x], atomic: false },
        { keys: [y, z], atomic: true },
      ]
      const holders = new Map<string, number>()
      const work = async (keys: string[], atomic: boolean, id: number) => {
        const client = ctx.client({ ttl: '60s' })
        for (let round = 0; round < 8; round++) {
          // A liveness bound on a loaded machine: a deadlock never ends, so it times out here.
          const all = await client.acquireAll(keys, { atomic, timeout: '30s' })
          for (const key of all.keys) {
            assert.equal(holders.get(key), undefined, `${key} held by ${holders.get(key)} and ${id}`)
            holders.set(key, id)
          }
          await sleep(2)
          for (const key of all.keys) holders.delete(key)
          await all.release()
          // A pause between rounds: an atomic set needs a moment when all its keys are free.
          await sleep(1 + ((round * 7 + id * 3) % 10))
        }
      }
      await Promise.all(workers.map(({ keys, atomic }, id) => work(keys, atomic, id)))
    },
  },

  {
    name: 'multikey-atomic: a lost reply is granted by the next attempt; giving up after one leaves nothing held',
    async run(ctx) {
      const base = ctx.key('lost-reply')
      const keys = [`${base}:1`, `${base}:2`, `${base}:3`]
      const observer = ctx.client()
      // The first reply lost: the retry finds the keys already ours and is granted them.
      const once = ctx.client(
        { ttl: LONG_TTL },
        losingReplies(await ctx.backend(), (n) => n === 1),
      )
      const all = await once.acquireAll(keys, { ...ATOMIC, timeout: '60s' })
      for (const key of keys) {
        assert.equal((await observer.inspect(key)).owner, all.locks.get(key)!.owner, `${key} is ours`)
      }
      await all.release()
      assert.ok(await allFree(ctx, keys), 'released')
      // Every reply lost: the acquisition fails, and its clean-up frees what the store did take.
      const never = ctx.client(
        { ttl: LONG_TTL },
        losingReplies(await ctx.backend(), () => true),
      )
      await assert.rejects(never.acquireAll(keys, { ...ATOMIC, timeout: ctx.ttl(2) }), (e) => {
        assert.ok(e instanceof BackendUnavailableError, `${e}`)
        assert.match(e.message, /no key is held by this call/)
        return true
      })
      assert.ok(
        await allFree(ctx, keys),
        'keys taken behind lost replies were cleaned up, not left for 120 s',
      )
      // An abort while waiting (one key held elsewhere) leaves nothing held either.
      const holder = await ctx.client({ ttl: LONG_TTL }).acquire(keys[2]!)
      const controller = new AbortController()
      const reason = new Error('aborted while waiting')
      const pending = awaitLater(
        ctx.client({ ttl: LONG_TTL }).acquireAll(keys, { ...ATOMIC, signal: controller.signal }),
      )
      await sleep(ctx.ttl(0.5))
      controller.abort(reason)
      await assert.rejects(pending, (e) => e === reason)
      assert.ok(await noneHeld(observer, keys.slice(0, 2)), 'nothing held after the abort')
      await holder.release()
    },
  },
]
