import assert from 'node:assert/strict'
import { type ListedLock, LockLostError } from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { abortedWithin } from '../../../support/wait.js'
import type { CaseContext, ConformanceCase } from '../../harness.js'

/** Every lock `list(prefix)` finds, by key. */
async function listed(list: AsyncIterable<ListedLock>): Promise<ListedLock[]> {
  const found: ListedLock[] = []
  for await (const lock of list) found.push(lock)
  return found.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
}

/** The part of `fence` that names its grant as another client reads it back (the kit's `grantOfFence`). */
const grantOf = (ctx: CaseContext, fence: bigint | undefined) =>
  fence === undefined || !ctx.kit.grantOfFence ? fence : ctx.kit.grantOfFence(fence)

/** What an operator needs when a holder is stuck: see the locks held, and break one without a fence going back. */
export const operationCases: ConformanceCase[] = [
  {
    name: 'list finds the held locks under a prefix, as inspect sees each, and leaves out free ones',
    async run(ctx) {
      const base = ctx.key('list')
      const prefix = `${base}/`
      const ttlMs = 20_000
      const holder = ctx.client({ ttl: ttlMs })
      const a = await holder.acquire(`${prefix}a`, { holder: 'worker a' })
      const nested = await holder.acquire(`${prefix}b/c`)
      const released = await holder.acquire(`${prefix}d`)
      await released.release()
      // Beside the prefix, not under it: a key that only shares its first characters.
      const beside = await holder.acquire(`${base}-beside`)
      const other = ctx.client()

      const found = await listed(other.list(prefix))
      assert.deepEqual(
        found.map((lock) => lock.key),
        [`${prefix}a`, `${prefix}b/c`],
        'list(prefix) finds exactly the held keys under it',
      )
      for (const [lock, got] of [
        [a, found[0]],
        [nested, found[1]],
      ] as const) {
        assert.equal(got?.held, true)
        assert.equal(got?.owner, lock.owner, `${lock.key}: owner`)
        assert.equal(grantOf(ctx, got?.fence), grantOf(ctx, lock.fence), `${lock.key}: fence`)
        assert.ok(
          got?.expiresInMs !== undefined && Number.isInteger(got.expiresInMs) && got.expiresInMs <= ttlMs,
          `${lock.key}: expiresInMs ${got?.expiresInMs}`,
        )
      }
      assert.equal(found[0]?.holder, 'worker a', 'the holder description, as inspect gives it')

      const everything = (await listed(other.list())).map((lock) => lock.key)
      for (const key of [`${prefix}a`, `${prefix}b/c`, `${base}-beside`]) {
        assert.ok(everything.includes(key), `list() finds ${key}`)
      }
      assert.ok(!everything.includes(`${prefix}d`), 'a released key is not listed')

      // Stopping early (an operator's `head`) ends the listing cleanly.
      for await (const _ of other.list()) break
      await Promise.all([a.release(), nested.release(), beside.release()])
      assert.deepEqual(
        await listed(other.list(prefix)),
        [],
        'nothing held under the prefix after the releases',
      )
    },
  },

  {
    name: 'break frees a held lock, keeps its fence, wakes a waiter, and the holder loses it at its next renewal',
    async run(ctx) {
      const key = ctx.key('break')
      const [holder, waiter, operator] = [ctx.client({ ttl: ctx.ttl(3) }), ctx.client(), ctx.client()]
      const stuck = await holder.acquire(key, { holder: 'stuck worker' })
      const next = awaitLater(waiter.acquire(key, { timeout: '30s' }))
      const broken = await operator.break(key)
      assert.equal(broken.broken, true)
      assert.equal(broken.lease?.owner, stuck.owner)
      assert.equal(grantOf(ctx, broken.lease?.fence), grantOf(ctx, stuck.fence))
      const taken = await next
      assert.ok(
        taken.fence > stuck.fence,
        `the next grant's fence ${taken.fence} > the broken one's ${stuck.fence}`,
      )
      await abortedWithin(stuck.signal, 30_000)
      assert.ok(stuck.signal.reason instanceof LockLostError, `lost: ${stuck.signal.reason}`)

      // A break aimed at the old grant leaves the new holder alone.
      const aimed = await operator.break(key, { fence: stuck.fence })
      assert.equal(aimed.broken, false, 'a break of another fence leaves the holder')
      assert.equal(grantOf(ctx, aimed.lease?.fence), grantOf(ctx, taken.fence))
      assert.equal((await operator.inspect(key)).owner, taken.owner)
      assert.equal(taken.signal.aborted, false)

      await taken.release()
      assert.deepEqual(await operator.break(key), { broken: false }, 'a free key: nothing to break')
      assert.deepEqual(await operator.break(ctx.key('never-used')), { broken: false })
      const after = await operator.acquire(key)
      assert.ok(after.fence > taken.fence, 'fences keep growing after a break and a release')
      await after.release()
    },
  },
]
