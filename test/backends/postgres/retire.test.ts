/**
 * PostgreSQL keeps the locks held or recently held, not every name ever used: a release deletes its row,
 * a row whose lease ended long ago (a crashed holder's) is retired by a later grant's housekeeping, and
 * a name's next grant still has a larger fence, across a restart of the server too.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { fromUrl } from '../../../src/backends/postgres/index.js'
import { DEFAULT_SCHEMA, DEFAULT_TABLE, qualified } from '../../../src/backends/postgres/layout.js'
import { adminQuery, postgresKit } from '../../kits/postgres.js'
import { suiteStore } from '../../kits/suite-store.js'
import { waitUntil } from '../../support/wait.js'

const TABLE = qualified({ schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE })

describe('postgres: released and long-ended rows are retired', { timeout: 180_000 }, () => {
  const { store, client } = suiteStore(postgresKit, { ttl: '5s', renew: false })
  /** A statement as the superuser, on the kit's server. */
  const admin = (text: string, params: string[] = []) => adminQuery<{ n: number }>(store(), text, params)
  const rows = async (prefix: string) =>
    Number(
      (await admin(`SELECT count(*)::int AS n FROM ${TABLE} WHERE starts_with(name, $1)`, [prefix]))[0]!.n,
    )

  it('after acquire and release of many distinct names, the table holds none of them', async () => {
    const locks = client()
    for (let i = 0; i < 200; i++) await (await locks.acquire(`many:${i}`, { timeout: '20s' })).release()
    assert.equal(await rows('many:'), 0)
  })

  it("a released name's row is gone, and its next grant has a larger fence, after a restart too", async () => {
    const locks = client()
    const first = await locks.acquire('again', { timeout: '20s' })
    await first.release()
    assert.equal(await rows('again'), 0, 'the released row is retired')
    const second = await locks.acquire('again', { timeout: '20s' })
    assert.ok(second.fence > first.fence, `fence ${second.fence} after ${first.fence}`)
    await second.release()
    await store().restart!()
    const third = await client().acquire('again', { timeout: '30s' })
    assert.ok(third.fence > second.fence, `fence ${third.fence} after a restart, ${second.fence} before`)
    await third.release()
  })

  it("a crashed holder's row is retired once its lease ended long ago; its late renewal is a loss", async () => {
    const crashed = await client().acquire('crashed', { timeout: '20s' })
    // Its lease ended two minutes ago on the server's clock (a holder that stopped renewing long ago).
    await admin(`UPDATE ${TABLE} SET expires_at = clock_timestamp() - interval '2 minutes' WHERE name = $1`, [
      'crashed',
    ])
    // A fresh client's first grant runs the housekeeping, in the background.
    await (await client().acquire('other', { timeout: '20s' })).release()
    await waitUntil(async () => (await rows('crashed')) === 0, 'the long-ended row retired', {
      withinMs: 30_000,
    })
    await assert.rejects(crashed.extend(), (error: Error) => error.name === 'LockLostError')
    const next = await client().acquire('crashed', { timeout: '20s' })
    assert.ok(next.fence > crashed.fence, `fence ${next.fence} after the retired ${crashed.fence}`)
    await next.release()
  })

  it('doctor names a role that may not DELETE: its releases would fail', async () => {
    await (await client().acquire('made', { timeout: '20s' })).release()
    await admin('DROP ROLE IF EXISTS fencelock_nodelete')
    await admin('CREATE ROLE fencelock_nodelete LOGIN')
    await admin(`GRANT SELECT, INSERT, UPDATE ON ${TABLE} TO fencelock_nodelete`)
    const url = new URL(store().url())
    url.username = 'fencelock_nodelete'
    const backend = await fromUrl(url)
    try {
      const findings = await backend.doctor!(AbortSignal.timeout(20_000))
      assert.ok(
        findings.some(
          (f) => f.level === 'error' && /fencelock_nodelete may not DELETE.*GRANT DELETE/.test(f.message),
        ),
        JSON.stringify(findings),
      )
    } finally {
      await backend.close()
    }
  })

  it('a row whose lease ended a moment ago is kept: its holder may still renew it', async () => {
    const late = await client().acquire('late', { timeout: '20s' })
    await admin(`UPDATE ${TABLE} SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, [
      'late',
    ])
    // Housekeeping ran (a fresh client's first grant) and left it: a long-ended row beside it goes.
    await admin(
      `INSERT INTO ${TABLE} (name, owner, fence, expires_at) VALUES ('ended', 'gone', 1, clock_timestamp() - interval '1 hour')`,
    )
    await (await client().acquire('other', { timeout: '20s' })).release()
    await waitUntil(async () => (await rows('ended')) === 0, 'the long-ended row retired', {
      withinMs: 30_000,
    })
    assert.equal(await rows('late'), 1)
    await late.release()
  })
})
