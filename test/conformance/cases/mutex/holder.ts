import assert from 'node:assert/strict'
import { hostname } from 'node:os'
import type { ConformanceCase } from '../../harness.js'

/** Who holds a lock, in words: stored with each grant, kept across renewals, never left behind. */
export const holderCases: ConformanceCase[] = [
  {
    name: 'inspect shows the holder description: the host and pid by default',
    async run(ctx) {
      const key = ctx.key('holder-default')
      const lock = await ctx.client({ ttl: '20s' }).acquire(key)
      const info = await ctx.client().inspect(key)
      assert.equal(info.owner, lock.owner)
      assert.equal(info.holder, `${hostname()} (pid ${process.pid})`)
      await lock.release()
    },
  },

  {
    name: "keeps the holder's own description across renewals and shows the next holder's, never a stale one",
    async run(ctx) {
      const key = ctx.key('holder-given')
      const first = await ctx.client({ holder: 'build-7 (deploy)' }).acquire(key, { ttl: '20s' })
      await first.extend('25s')
      await first.extend()
      const held = await ctx.client().inspect(key)
      assert.equal(held.holder, 'build-7 (deploy)')
      await first.release()
      const free = await ctx.client().inspect(key)
      assert.equal(free.held, false)
      assert.equal(free.holder, undefined, 'a free lock has no holder')
      // The per-call option wins over the client's; a grant that gives one replaces the last holder's.
      const second = await ctx
        .client({ holder: 'ignored' })
        .acquire(key, { ttl: '20s', holder: 'cron on web-2 ✓' })
      assert.equal((await ctx.client().inspect(key)).holder, 'cron on web-2 ✓')
      await second.release()
    },
  },

  {
    name: 'refuses a holder description that is not printable text, before any I/O',
    async run(ctx) {
      const client = ctx.client()
      const key = ctx.key('holder-bad')
      await assert.rejects(client.acquire(key, { holder: 'two\nlines' }), /control characters/)
      await assert.rejects(client.acquire(key, { holder: '\u001b[2Jcleared' }), /control characters/)
      await assert.rejects(client.acquire(key, { holder: 'x'.repeat(257) }), /at most 256 bytes/)
      await assert.rejects(client.acquire(key, { holder: '' }), /non-empty string/)
      assert.equal((await client.inspect(key)).held, false)
    },
  },
]
