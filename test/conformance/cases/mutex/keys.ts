import assert from 'node:assert/strict'
import type { ConformanceCase } from '../../harness.js'

export const keyCases: ConformanceCase[] = [
  {
    name: 'refuses an empty key with a TypeError naming it',
    async run(ctx) {
      const client = ctx.client()
      await assert.rejects(
        client.acquire(''),
        (error: unknown) => error instanceof TypeError && /`key`/.test(error.message),
      )
      await assert.rejects(client.tryAcquire(''), TypeError)
      await assert.rejects(client.inspect(''), TypeError)
    },
  },

  {
    name: 'keeps long, path-like, unicode and case-only-different keys distinct',
    async run(ctx) {
      const client = ctx.client()
      const base = ctx.key('names')
      const names = [
        `${base}:${'x'.repeat(1000)}`,
        `${base}:${'x'.repeat(999)}y`,
        `${base}/a/b`,
        `${base}_a_b`,
        `${base}\\a\\b`,
        `${base}:../../etc`,
        `${base}:鍵🔒`,
        `${base}:Key`,
        `${base}:key`,
        `${base}:KEY`,
        `${base}: spaced key `,
        `${base}:\n\t`,
      ]
      // All taken at once and held together: any two mapped to the same record would collide here, one of
      // the two refused. At once, as a store whose new records wait for its clock (cas stores: 1-2 s each)
      // takes one such wait for all of them. With a timeout: twelve first writes at once on a loaded machine
      // may take more than a try's one second to answer; a collision still ends in null, only later.
      const taken = await Promise.all(names.map((name) => client.tryAcquire(name, { timeout: '20s' })))
      const locks = taken.map((lock, i) => {
        assert.ok(
          lock,
          `could not take ${JSON.stringify(names[i]!.slice(base.length))} while the others are held`,
        )
        return lock
      })
      for (const [i, name] of names.entries()) {
        const info = await client.inspect(name)
        assert.equal(
          info.owner,
          locks[i]!.owner,
          `inspect(${JSON.stringify(name.slice(base.length))}) shows another holder`,
        )
      }
      await Promise.all(locks.map((l) => l.release()))
    },
  },
]
