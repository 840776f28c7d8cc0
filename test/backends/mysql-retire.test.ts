/**
 * MySQL/MariaDB keeps the locks held or recently held, not every name ever used, on a real MariaDB 10.11:
 * a row released or expired long enough ago (statements.ts, `RETIRE_BEFORE`) is retired by a later
 * grant's housekeeping, a row ended a moment ago stays, and a name's next grant still has a larger fence,
 * across a restart of the server too. Time passes here by moving rows' ends back (the kit's `expireRow`,
 * an hour).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { fromUrl } from '../../src/backends/mysql/index.js'
import { createLockClient, type LockClient } from '../../src/index.js'
import type { Kit, KitStore } from '../kits/kit.js'
import { expireRow, mariaDbQuery, mysqlAnsiKit, mysqlKit, mysqlOracleKit } from '../kits/mysql.js'
import { waitUntil } from '../support/wait.js'

/** The cases on `kit`'s server: all of them, or (other server settings) the retiring alone. */
const retireSuite = (kit: Kit, all: boolean) =>
  describe(`${kit.title}: long-ended rows are retired`, { timeout: 180_000 }, () => {
    let store: KitStore
    const open: LockClient[] = []
    const client = () => {
      const c = createLockClient(store.url(), { ttl: '5s', renew: false })
      open.push(c)
      return c
    }
    before(async () => {
      store = await kit.start()
    })
    after(async () => {
      await Promise.all(open.map((c) => c.close().catch(() => {})))
      await store?.close()
    })

    const port = () => Number(new URL(store.url()).port)
    const rows = async (prefix: string) => {
      const found = (await mariaDbQuery(
        port(),
        'SELECT COUNT(*) AS n FROM fencelock_locks WHERE LEFT(lock_key, ?) = CAST(? AS BINARY)',
        [Buffer.byteLength(prefix), prefix],
      )) as { n: number }[]
      return Number(found[0]!.n)
    }
    /** Moves the end of every row under `prefix` an hour back (as if an hour had passed). */
    const age = (prefix: string) =>
      mariaDbQuery(
        port(),
        'UPDATE fencelock_locks SET expires_at = expires_at - 3600000000 WHERE LEFT(lock_key, ?) = CAST(? AS BINARY)',
        [Buffer.byteLength(prefix), prefix],
      )
    /** A fresh client's first grant runs the housekeeping (in the background). */
    const housekeeping = async () =>
      (await client().acquire(`other:${Math.random()}`, { timeout: '20s' })).release()

    it('after acquire and release of many distinct names, once they ended long ago, the table holds none', async () => {
      const locks = client()
      for (let i = 0; i < 200; i++) await (await locks.acquire(`many:${i}`, { timeout: '20s' })).release()
      await age('many:')
      await housekeeping()
      await waitUntil(async () => (await rows('many:')) === 0, 'the released rows retired', {
        withinMs: 30_000,
      })
    })

    if (!all) return

    it("a retired name's next grant has a larger fence, after a restart too", async () => {
      const locks = client()
      const first = await locks.acquire('again', { timeout: '20s' })
      await first.release()
      await age('again')
      await housekeeping()
      await waitUntil(async () => (await rows('again')) === 0, 'the released row retired', {
        withinMs: 30_000,
      })
      const second = await locks.acquire('again', { timeout: '20s' })
      assert.ok(second.fence > first.fence, `fence ${second.fence} after ${first.fence}`)
      await second.release()
      await age('again')
      await store.restart!()
      await housekeeping()
      await waitUntil(async () => (await rows('again')) === 0, 'retired after the restart', {
        withinMs: 30_000,
      })
      const third = await client().acquire('again', { timeout: '30s' })
      assert.ok(third.fence > second.fence, `fence ${third.fence} after a restart, ${second.fence} before`)
      await third.release()
    })

    it("a crashed holder's row is retired once its lease ended long ago; its late renewal is a loss", async () => {
      const crashed = await client().acquire('crashed', { timeout: '20s' })
      await expireRow(port(), 'crashed')
      await housekeeping()
      await waitUntil(async () => (await rows('crashed')) === 0, 'the long-ended row retired', {
        withinMs: 30_000,
      })
      await assert.rejects(crashed.extend(), (error: Error) => error.name === 'LockLostError')
      const next = await client().acquire('crashed', { timeout: '20s' })
      assert.ok(next.fence > crashed.fence, `fence ${next.fence} after the retired ${crashed.fence}`)
      await next.release()
    })

    it('doctor warns when the user may not DELETE: ended rows would never be retired', async () => {
      await (await client().acquire('made', { timeout: '20s' })).release()
      await mariaDbQuery(port(), "DROP USER IF EXISTS 'fl_nodelete'@'%'")
      await mariaDbQuery(port(), "CREATE USER 'fl_nodelete'@'%'")
      await mariaDbQuery(port(), "GRANT SELECT, INSERT, UPDATE ON fencelock_locks TO 'fl_nodelete'@'%'")
      const findingsOf = async (user: string) => {
        const url = new URL(store.url())
        url.username = user
        const backend = await fromUrl(url)
        try {
          return await backend.doctor!(AbortSignal.timeout(20_000))
        } finally {
          await backend.close()
        }
      }
      const denied = await findingsOf('fl_nodelete')
      assert.ok(
        denied.some(
          (f) => f.level === 'warn' && /fl_nodelete.* may not DELETE.*GRANT DELETE ON/.test(f.message),
        ),
        JSON.stringify(denied),
      )
      const allowed = await findingsOf('root')
      assert.ok(
        allowed.some((f) => f.level === 'ok' && /may DELETE/.test(f.message)),
        JSON.stringify(allowed),
      )
    })

    it('a row released or expired a moment ago stays', async () => {
      await (await client().acquire('recent', { timeout: '20s' })).release()
      const late = await client().acquire('late', { timeout: '20s' })
      await mariaDbQuery(
        port(),
        'UPDATE fencelock_locks SET expires_at = expires_at - 6000000 WHERE lock_key = ?',
        ['late'],
      )
      await (await client().acquire('ended', { timeout: '20s' })).release()
      await age('ended')
      await housekeeping()
      await waitUntil(async () => (await rows('ended')) === 0, 'the long-ended row retired', {
        withinMs: 30_000,
      })
      assert.equal(await rows('recent'), 1)
      assert.equal(await rows('late'), 1)
      await late.release().catch(() => {})
    })
  })

retireSuite(mysqlKit, true)
// The statements under the server-wide settings the conformance suite also runs under.
retireSuite(mysqlOracleKit, false)
retireSuite(mysqlAnsiKit, false)
