/**
 * Resuming a held lock from its token (`lock.token()`, `locks.resume(token)`): in another client and in
 * another process it keeps the lock with the same owner and fence, renews it past its ttl and releases it;
 * a token whose lease ended (expired, released) is refused with a `LockLostError`; a damaged token, or one of
 * another store, with a `TypeError`; and a lock held by two handles (the original and the resumed) ends
 * for both at the first release. Each lock handed on is acquired `resumable` (on etcd, a lease of its own).
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { LockLostError } from '../../../../src/index.js'
import { sleep } from '../../../support/time.js'
import { abortedWithin } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

/** The library as a child process imports it (tests are compiled beside build/src). */
const INDEX = new URL('../../../../src/index.js', import.meta.url).href

/** A child process: resumes the token, holds past the lease's ttl, then releases; one JSON line per step. */
const CHILD = `
const { createLockClient } = await import(process.env.FENCELOCK_INDEX)
const locks = createLockClient(process.env.FENCELOCK_URL)
const say = (event) => console.log(JSON.stringify(event))
const lock = await locks.resume(process.env.FENCELOCK_TOKEN)
say({ event: 'resumed', owner: lock.owner, fence: String(lock.fence) })
await new Promise((resolve) => setTimeout(resolve, Number(process.env.FENCELOCK_HOLD_MS)))
say({ event: 'held', lost: lock.signal.aborted })
// A store that did not answer the release in time (a loaded machine) lets the lease end by its ttl.
const unknown = await lock.release().then(() => false, (error) => String(error))
await locks.close()
say({ event: 'released', unknown })
`

/** The token's JSON body, for cases that make damaged or foreign tokens out of a real one. */
function bodyOf(token: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(token.slice(token.indexOf('.') + 1), 'base64url').toString('utf8'))
}
const tokenOf = (body: Record<string, unknown>) =>
  `fencelock1.${Buffer.from(JSON.stringify(body)).toString('base64url')}`

export const resumeCases: ConformanceCase[] = [
  {
    name: 'resume in another client keeps the lock (same owner and fence), renews it past its ttl, releases it',
    async run(ctx) {
      const key = ctx.key('resume')
      const ttl = ctx.ttl(2)
      // The original renews nothing: whatever keeps the lock past its ttl is the resumed handle.
      const original = await ctx.client({ ttl, renew: false }).acquire(key, { resumable: true })
      const resumed = await ctx.client().resume(original.token())
      assert.equal(resumed.key, key)
      assert.equal(resumed.owner, original.owner)
      assert.equal(resumed.fence, original.fence)
      assert.ok(resumed.remainingMs > 0)
      await sleep(ttl * 3)
      assert.equal(resumed.signal.aborted, false, `lost: ${resumed.signal.reason}`)
      const other = ctx.client()
      assert.equal(await other.tryAcquire(key), null, 'the resumed lock is still held')
      assert.equal((await other.inspect(key)).owner, original.owner)
      await resumed.release()
      const next = await other.tryAcquire(key)
      assert.ok(next, 'free after the resumed handle released it')
      assert.ok(next.fence > original.fence)
      await next.release()
    },
  },

  {
    name: 'resume in a child process keeps the lock past its ttl and releases it; closing the parent leaves it',
    requires: ['processes'],
    async run(ctx) {
      const key = ctx.key('resume-child')
      // At least 2 s: a process started on a loaded machine renews a 600 ms lease too late (it failed at
      // load 10-20 on PostgreSQL, MariaDB and Redlock), and this case is about handing the lock on.
      const ttl = Math.max(2000, ctx.ttl(2))
      // The parent renews until the child has resumed (a child starts slowly on a loaded machine), then
      // closes its client: a lock whose token was made is left to it, not released.
      const parent = ctx.client({ ttl })
      const original = await parent.acquire(key, { resumable: true })
      const child = spawn(process.execPath, ['--input-type=module', '-e', CHILD], {
        env: {
          ...process.env,
          FENCELOCK_INDEX: INDEX,
          FENCELOCK_URL: ctx.store().url(),
          FENCELOCK_TOKEN: original.token(),
          FENCELOCK_HOLD_MS: String(ttl * 3),
        },
      })
      let stderr = ''
      child.stderr.on('data', (chunk) => {
        stderr += chunk
      })
      const events: Array<Record<string, unknown>> = []
      const exited = new Promise<number | null>((resolve) => child.on('close', resolve))
      createInterface({ input: child.stdout }).on('line', (line) => {
        events.push(JSON.parse(line) as Record<string, unknown>)
        if (events.length === 1) void parent.close()
      })
      const killer = setTimeout(() => child.kill('SIGKILL'), 120_000)
      const code = await exited
      clearTimeout(killer)
      assert.equal(code, 0, `the child failed: ${stderr}`)
      assert.deepEqual(
        events.map((e) => e.event),
        ['resumed', 'held', 'released'],
      )
      assert.equal(events[0]!.owner, original.owner)
      assert.equal(events[0]!.fence, String(original.fence))
      assert.equal(events[1]!.lost, false, 'the child kept the lock past its ttl, the parent closed')
      assert.ok(original.signal.aborted, 'the closed parent no longer counts on it')
      // At once after a release that landed; by the lease's ttl after one whose outcome is unknown.
      const next = await ctx.client().acquire(key, { timeout: '30s' })
      assert.ok(next.fence > original.fence)
      await next.release()
    },
  },

  {
    name: 'the original and the resumed handle hold one lease: the first release ends it for both',
    async run(ctx) {
      const key = ctx.key('resume-both')
      // At least 10 s: Redlock gives each node a hundredth of the ttl to answer (at least 20 ms), which a
      // loaded machine misses at a short ttl; the original still hears of the release within 4 s.
      const ttl = Math.max(ctx.ttl(2), 10_000)
      const original = await ctx.client({ ttl }).acquire(key, { resumable: true })
      const resumed = await ctx.client({ ttl }).resume(original.token())
      await resumed.release()
      // The original hears of it at its next renewal at the latest (on stores whose renewals rewrite the
      // record, at its first renewal after the resume): a generous bound, not a speed claim.
      await abortedWithin(original.signal, ttl * 3 + 20_000)
      assert.ok(original.signal.reason instanceof LockLostError, `${original.signal.reason}`)
      await original.release()
      const next = await ctx.client().tryAcquire(key)
      assert.ok(next, 'free after the first release')
      await next.release()
    },
  },

  {
    name: 'resume of a released lock, or of one whose lease expired, fails with LockLostError',
    async run(ctx) {
      const client = ctx.client()
      const gone = (error: unknown) => {
        assert.ok(error instanceof LockLostError, `expected a LockLostError, got ${error}`)
        assert.match(error.message, /Cannot resume lock .* acquire the lock anew/)
        return true
      }
      const released = await ctx.client().acquire(ctx.key('resume-released'), { resumable: true })
      const token = released.token()
      await released.release()
      await assert.rejects(client.resume(token), gone)

      const ttl = ctx.ttl(1)
      const expired = await ctx.client({ ttl, renew: false }).acquire(ctx.key('resume-expired'), {
        resumable: true,
      })
      const late = expired.token()
      await abortedWithin(expired.signal, ttl + 20_000)
      // Past the store's own end of the lease too: its clock may run a little behind ours.
      await sleep(ttl + 500)
      await assert.rejects(client.resume(late), gone)
    },
  },

  {
    name: 'a damaged token, or a token of another store, is refused with a TypeError saying what is wrong',
    async run(ctx) {
      const client = ctx.client()
      const lock = await ctx.client().acquire(ctx.key('resume-damaged'), { resumable: true })
      const body = bodyOf(lock.token())
      const refused = (says: RegExp) => (error: unknown) => {
        assert.ok(error instanceof TypeError, `expected a TypeError, got ${error}`)
        assert.match(error.message, says)
        return true
      }
      await assert.rejects(client.resume(42 as unknown as string), refused(/Expected a lock token/))
      await assert.rejects(client.resume('not a token'), refused(/starting "fencelock1\."/))
      await assert.rejects(client.resume('fencelock9.e30'), refused(/version 9/))
      await assert.rejects(client.resume('fencelock1.%%%'), refused(/damaged/))
      await assert.rejects(client.resume(tokenOf({ ...body, fence: 'x' })), refused(/`fence`/))
      await assert.rejects(client.resume(tokenOf({ ...body, owner: 7 })), refused(/`owner`/))
      await assert.rejects(
        client.resume(tokenOf({ ...body, backend: 'elsewhere://store' })),
        refused(/made on|on elsewhere:\/\/store, and this client is on/),
      )
      await assert.rejects(client.resume(tokenOf({ ...body, cookie: { forged: true } })), refused(/damaged/))
      assert.equal(lock.signal.aborted, false, 'refused tokens leave the lock alone')
      await lock.release()
    },
  },
]
