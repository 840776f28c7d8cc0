import assert from 'node:assert/strict'
import type { LockInfo } from '../../../../src/index.js'
import type { ConformanceCase } from '../../harness.js'

/** The fields of `info`, checked for the shape every backend gives them. */
function assertShape(info: LockInfo, what: string): void {
  assert.equal(typeof info.held, 'boolean', `${what}: held`)
  for (const field of ['owner', 'holder', 'note'] as const) {
    const value = info[field]
    assert.ok(value === undefined || typeof value === 'string', `${what}: ${field} is ${typeof value}`)
  }
  assert.ok(info.fence === undefined || typeof info.fence === 'bigint', `${what}: fence`)
  if (info.expiresInMs !== undefined) {
    assert.ok(Number.isInteger(info.expiresInMs), `${what}: expiresInMs ${info.expiresInMs} is not whole ms`)
  }
}

/** What `inspect` says has one shape everywhere: the same fields, with the same meaning. */
export const inspectCases: ConformanceCase[] = [
  {
    name: 'inspect gives one shape: whole-ms expiresInMs from any client while held, the fence after release',
    async run(ctx) {
      const key = ctx.key('inspect-shape')
      const ttlMs = 20_000
      const lock = await ctx.client({ ttl: ttlMs }).acquire(key)
      // Another client (another process would see the same): nothing of the holder's own state helps it.
      const other = ctx.client()
      const held = await other.inspect(key)
      assertShape(held, 'held')
      assert.equal(held.held, true)
      assert.equal(held.owner, lock.owner)
      assert.equal(typeof held.fence, 'bigint', 'held: fence')
      assert.equal(typeof held.expiresInMs, 'number', 'held: expiresInMs')
      assert.ok(held.expiresInMs! > 0 && held.expiresInMs! <= ttlMs, `held: expiresInMs ${held.expiresInMs}`)
      await lock.release()
      const free = await other.inspect(key)
      assertShape(free, 'free')
      assert.equal(free.held, false)
      assert.equal(free.owner, undefined)
      assert.equal(free.expiresInMs, undefined)
      // The latest fence (or a store-wide revision at least as large): what a resource has seen so far.
      assert.equal(typeof free.fence, 'bigint', 'free after a release: fence')
      assert.ok(free.fence! > 0n)
    },
  },
]
