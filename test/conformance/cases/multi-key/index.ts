/**
 * Multi-key locks, on every backend (taken one by one in sorted order through the mutex): the keys
 * de-duplicated and sorted by their UTF-8 bytes, a fence per key, all or nothing (a key held elsewhere
 * leaves none of the others held, and frees them at once, not at the end of their leases), overlapping sets
 * in opposite orders never deadlocking, an abort at any point leaving nothing held, one loss signal, and
 * the refusals. All through the public API.
 */
import assert from 'node:assert/strict'
import {
  BackendUnavailableError,
  type LockClient,
  LockError,
  LockLostError,
  LockNotAcquiredError,
  type MultiLock,
} from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import { abortedWithin, pollUntil } from '../../../support/wait.js'
import type { CaseContext, ConformanceCase } from '../../harness.js'

/** The generous bound of every wait: a liveness limit on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

/**
 * A lease far longer than any wait below: a key still held after a failed acquire would stay held past
 * every bound, so "free" can only mean "released", not "expired".
 */
const LONG_TTL = '120s'

/**
 * Whether every key of `keys` can be taken by a client of its own (which gives them back), tried until
 * `WITHIN` passes: a store may refuse an attempt that races its own clean-up of a released key (the file
 * store retires a released key's folder) or not answer in time, so one refusal is not proof the key is held.
 */
async function allFree(ctx: CaseContext, keys: readonly string[]): Promise<boolean> {
  const probe = ctx.client()
  return pollUntil(
    async () => {
      // A store slow to answer on a loaded machine says nothing of who holds the keys: try again.
      const all = await probe.tryAcquireAll(keys).catch((error: unknown) => {
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

export const multiKeyCases: ConformanceCase[] = [
  {
    name: 'multikey: keys are de-duplicated and sorted by their UTF-8 bytes, each held with its own fence',
    async run(ctx) {
      const client = ctx.client({ ttl: LONG_TTL })
      const base = ctx.key('sorted')
      // UTF-16 order puts the emoji (a surrogate pair, 0xD83D…) before U+FF5E; UTF-8 bytes put it after.
      const asked = [`${base}:b`, `${base}:\uFF5E`, `${base}:a`, `${base}:b`, `${base}:😀`, `${base}:Z`]
      const expected = [`${base}:Z`, `${base}:a`, `${base}:b`, `${base}:\uFF5E`, `${base}:😀`]
      // An earlier grant of one key: the multi-key grant's fence for it is greater.
      const earlier = await client.acquire(`${base}:a`)
      await earlier.release()
      const all = await client.acquireAll(asked)
      assert.deepEqual(all.keys, expected)
      assert.deepEqual([...all.locks.keys()], expected)
      assert.deepEqual([...all.fences.keys()], expected)
      for (const key of expected) {
        const lock = all.locks.get(key)!
        assert.equal(lock.key, key)
        assert.equal(all.fences.get(key), lock.fence)
        assert.equal((await client.inspect(key)).owner, lock.owner, `${key} is held by its own lock`)
      }
      assert.ok(all.fences.get(`${base}:a`)! > earlier.fence, 'a fence greater than the earlier grant')
      assert.equal(new Set(all.locks.values()).size, expected.length, 'one lock per key')
      assert.ok(all.validUntil <= Math.min(...[...all.locks.values()].map((l) => l.validUntil)))
      assert.equal(all.signal.aborted, false)
      assert.deepEqual(await all.release(), [], 'every key was still held at the release')
      assert.deepEqual(await all.release(), [], 'release is idempotent')
      assert.ok(await allFree(ctx, expected), 'the release freed every key')
    },
  },

  {
    name: 'multikey: a key held elsewhere times the whole acquire out, and the others are free at once',
    async run(ctx) {
      const base = ctx.key('all-or-none')
      const keys = [`${base}:1`, `${base}:2`, `${base}:3`]
      const [a, b] = [ctx.client({ ttl: LONG_TTL }), ctx.client({ ttl: LONG_TTL })]
      const held = await b.acquire(keys[1]!)
      const error = await a.acquireAll(keys, { timeout: ctx.ttl(2) }).then(
        () => assert.fail('acquired a key held elsewhere'),
        (e: unknown) => e,
      )
      assert.ok(error instanceof LockNotAcquiredError, `got ${error}`)
      assert.equal(error.key, keys[1], 'the error names the key it stopped at')
      assert.match(error.message, /key 2 of 3/)
      // Released before the rejection: free now, with their leases of minutes still to run.
      assert.ok(await allFree(ctx, [keys[0]!, keys[2]!]), 'the keys taken before the failure were released')
      assert.equal(await a.tryAcquireAll(keys), null, 'tryAcquireAll resolves null')
      assert.ok(await allFree(ctx, [keys[0]!, keys[2]!]), 'tryAcquireAll left nothing held either')
      await held.release()
      const all = await a.tryAcquireAll(keys)
      assert.ok(all, 'all three are free once the holder released')
      await all.release()
    },
  },

  {
    name: 'multikey: overlapping key sets asked in opposite and cyclic orders never deadlock',
    run: (ctx) => crossingSets(ctx, {}),
  },

  {
    name: 'multikey: an abort at any point of the acquisition leaves no key held',
    async run(ctx) {
      const base = ctx.key('abort')
      const keys = [`${base}:1`, `${base}:2`, `${base}:3`]
      const [a, b] = [ctx.client({ ttl: LONG_TTL }), ctx.client({ ttl: LONG_TTL })]
      // The last key held elsewhere: the acquisition waits there with the first two taken.
      const held = await b.acquire(keys[2]!)
      const moments = [
        'before the call',
        'in the same turn',
        'after a turn',
        'after the first key',
        'while waiting for the last',
      ] as const
      for (const when of moments) {
        const controller = new AbortController()
        const reason = new Error(`aborted ${when}`)
        if (when === 'before the call') controller.abort(reason)
        const pending = awaitLater(a.acquireAll(keys, { signal: controller.signal }))
        if (when === 'after a turn') await new Promise((resolve) => setImmediate(resolve))
        if (when === 'after the first key') await heldNow(a, keys[0]!)
        if (when === 'while waiting for the last') await heldNow(a, keys[1]!)
        controller.abort(reason)
        await assert.rejects(pending, (e) => e === reason, `rejects with the reason (${when})`)
        // An attempt in flight at the abort is cleaned up behind the rejection: free long before its lease ends.
        assert.ok(await allFree(ctx, keys.slice(0, 2)), `keys still held after an abort ${when}`)
      }
      await held.release()
    },
  },

  {
    name: 'multikey: the signal aborts when any key is lost, and release names the keys lost',
    async run(ctx) {
      const base = ctx.key('loss')
      const keys = [`${base}:1`, `${base}:2`]
      const [a, b] = [ctx.client({ ttl: ctx.ttl(3) }), ctx.client()]
      const all = await a.acquireAll(keys)
      await ctx.store().breakLease(keys[1]!)
      const next = await b.acquire(keys[1]!, { timeout: '20s' })
      await abortedWithin(all.signal, 20_000)
      assert.ok(all.signal.reason instanceof LockLostError, `${all.signal.reason}`)
      assert.equal(all.signal.reason.key, keys[1], 'the loss names the key lost')
      assert.ok(next.fence > all.fences.get(keys[1]!)!)
      assert.equal(all.locks.get(keys[0]!)!.signal.aborted, false, 'the other key is still held')
      assert.deepEqual(await all.release(), [keys[1]], 'release names the key that was no longer held')
      assert.equal((await b.inspect(keys[1]!)).owner, next.owner, 'the new holder keeps its key')
      assert.ok(await allFree(ctx, [keys[0]!]), 'the key still held was released')
      await next.release()
    },
  },

  {
    name: 'multikey: withAll holds every key for its function, refuses re-taking one inside, then frees them',
    async run(ctx) {
      const base = ctx.key('with')
      const keys = [`${base}:2`, `${base}:1`]
      const client = ctx.client({ ttl: LONG_TTL })
      const result = await client.withAll(keys, async (all: MultiLock) => {
        assert.deepEqual(all.keys, [`${base}:1`, `${base}:2`])
        assert.equal(await ctx.client().tryAcquire(keys[0]!), null, 'held inside withAll')
        await assert.rejects(client.acquire(keys[0]!), (e) => {
          assert.ok(e instanceof LockError && e.code === 'FENCELOCK_SELF_DEADLOCK', `${e}`)
          return true
        })
        return 'done'
      })
      assert.equal(result, 'done')
      assert.ok(await allFree(ctx, keys), 'withAll released every key')
      await assert.rejects(
        client.withAll(keys, () => {
          throw new Error('work failed')
        }),
        /work failed/,
      )
      assert.ok(await allFree(ctx, keys), 'released after the work failed too')
    },
  },

  {
    name: 'multikey: refuses an empty list, a bad key (naming it) and a misspelt option, before any I/O',
    async run(ctx) {
      // Every call the backend gets is counted: a refusal sends nothing.
      const calls: string[] = []
      const backend = await ctx.backend()
      const counted = new Proxy(backend, {
        get(target, name, receiver) {
          const value = Reflect.get(target, name, receiver)
          if (typeof value !== 'function' || name === 'close') return value?.bind?.(target) ?? value
          return (...args: unknown[]) => {
            calls.push(String(name))
            return value.apply(target, args)
          }
        },
      })
      const client = ctx.client(undefined, counted)
      const key = ctx.key('refused')
      await assert.rejects(client.acquireAll([]), /at least one lock key/)
      await assert.rejects(client.acquireAll([key, '']), /index 1 of `keys`/)
      await assert.rejects(client.acquireAll(key as unknown as string[]), /array of lock keys/)
      await assert.rejects(client.acquireAll([key], { atomc: true } as never), /did you mean `atomic`/)
      await assert.rejects(client.acquireAll([key], { atomic: 1 } as never), /`atomic` to be a boolean/)
      assert.deepEqual(calls, [], 'a refusal sends nothing to the store')
    },
  },
]

/**
 * Workers taking overlapping key sets in opposite and cyclic orders (each pair deadlocks when taken in the
 * order given), five rounds each: they all finish, no key ever has two holders, and each key's fences rise.
 */
export async function crossingSets(ctx: CaseContext, options: { readonly atomic?: boolean }): Promise<void> {
  const base = ctx.key('orders')
  const [x, y, z] = [`${base}:x`, `${base}:y`, `${base}:z`]
  const sets = [[x, y, z], [z, y, x], [x, y], [y, z], [z, x], [y]]
  const clients = sets.map(() => ctx.client({ ttl: '20s' }))
  const holders = new Map<string, number>()
  const fences = new Map<string, bigint[]>()
  const worker = async (client: LockClient, keys: string[], id: number) => {
    for (let round = 0; round < 5; round++) {
      // The bound of a liveness failure on a loaded machine; a deadlock never ends.
      const all = await client.acquireAll(keys, { ...options, timeout: '120s' })
      for (const key of all.keys) {
        assert.equal(holders.get(key), undefined, `${key} held by ${holders.get(key)} and ${id}`)
        holders.set(key, id)
        fences.set(key, [...(fences.get(key) ?? []), all.fences.get(key)!])
      }
      await sleep(2)
      for (const key of all.keys) holders.delete(key)
      await all.release()
    }
  }
  await Promise.all(clients.map((client, i) => worker(client, sets[i]!, i)))
  for (const [key, seen] of fences) {
    const sorted = [...seen].sort((p, q) => (p < q ? -1 : p > q ? 1 : 0))
    assert.deepEqual(seen, sorted, `${key}: fences rise grant after grant`)
    assert.equal(new Set(seen).size, seen.length, `${key}: every grant has its own fence`)
  }
}

/** Waits until `key` is held (the acquisition under way got that far). */
async function heldNow(client: LockClient, key: string): Promise<void> {
  const info = await pollUntil(
    () => client.inspect(key),
    (i) => i.held,
    WITHIN,
  )
  assert.ok(info.held, `${key} was never taken`)
}
