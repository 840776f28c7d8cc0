/**
 * MySQL/MariaDB elections, as the store sees them (the conformance cases see them through the API only), on
 * a real MariaDB 10.11: the elections table beside the lock table and its rows, a lock and an election of
 * one name apart, a proclaim refused on the store after a takeover, a killed leader's row retired after its
 * lease and the next term still greater, the DDL when the table may not be made, and no watch (observers
 * read once a second).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { electionsTableName, fromUrl } from '../../../src/backends/mysql/index.js'
import { DEFAULT_TABLE } from '../../../src/backends/mysql/layout.js'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import type { KitStore } from '../../kits/kit.js'
import { expireRow, mariaDbQuery, mysqlKit } from '../../kits/mysql.js'
import { waitUntil } from '../../support/wait.js'

const ELECTIONS = electionsTableName(DEFAULT_TABLE)

describe('mysql: elections on the store', { timeout: 240_000 }, () => {
  let store: KitStore
  const open: LockClient[] = []
  const client = (options: { ttl?: string; renew?: boolean } = {}) => {
    const c = createLockClient(store.url(), { ttl: '20s', ...options })
    open.push(c)
    return c
  }
  const port = () => Number(new URL(store.url()).port)
  const electionRows = async (name: string) =>
    (
      (await mariaDbQuery(
        port(),
        `SELECT owner, CAST(fence AS CHAR) AS fence, value FROM ${ELECTIONS} WHERE lock_key = ?`,
        [name],
      )) as { owner: string; fence: string; value: Buffer }[]
    ).map((row) => ({ owner: row.owner, fence: row.fence, value: Buffer.from(row.value).toString('utf8') }))

  before(async () => {
    store = await mysqlKit.start()
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})))
    await store?.close()
  })

  it('an election is a row of <table>_elections with its value; a lock of the same name is apart', async () => {
    assert.equal(ELECTIONS, 'fencelock_locks_elections')
    const locks = client()
    const lock = await locks.acquire('same-name', { timeout: '20s' })
    const lead = await locks
      .election('same-name')
      .campaign({ value: 'http://[::1]:8080/é 🗳', timeout: '20s' })
    assert.deepEqual(await electionRows('same-name'), [
      { owner: lead.owner, fence: String(lead.term), value: 'http://[::1]:8080/é 🗳' },
    ])
    const lockRows = (await mariaDbQuery(port(), `SELECT owner FROM ${DEFAULT_TABLE} WHERE lock_key = ?`, [
      'same-name',
    ])) as { owner: string }[]
    assert.deepEqual(
      lockRows.map((r) => r.owner),
      [lock.owner],
    )
    await lock.release()
    const view = await locks.election('same-name').leader()
    assert.ok(view.leader && view.owner === lead.owner, 'releasing the lock leaves the leadership')
    await lead.resign()
    assert.equal((await locks.election('same-name').leader()).leader, false)
    assert.equal((await locks.inspect('same-name')).held, false)
  })

  it("a leader replaced after its lease cannot proclaim: the store keeps its successor's value", async () => {
    const old = await client({ ttl: '5s', renew: false })
      .election('takeover')
      .campaign({ value: 'old', timeout: '20s' })
    // Its lease ended on the server's clock (a leader paused past its lease).
    await expireRow(port(), 'takeover', ELECTIONS)
    const next = await client().election('takeover').campaign({ value: 'next', timeout: '20s' })
    assert.ok(next.term > old.term)
    await assert.rejects(old.proclaim('late'), LockLostError)
    assert.deepEqual(
      (await electionRows('takeover')).map((r) => r.value),
      ['next'],
    )
    await next.resign()
  })

  it("a killed leader's row is retired after its lease; the next term is still greater", async () => {
    // Killed: it never renews nor resigns (its client is left open, never used again).
    const killed = await client({ ttl: '5s', renew: false }).election('killed').campaign({ timeout: '20s' })
    // Its lease ended an hour ago on the server's clock: past the retiring margin.
    await expireRow(port(), 'killed', ELECTIONS)
    // A fresh client's first grant of an election runs the elections table's housekeeping.
    await (await client().election(`other:${Math.random()}`).campaign({ timeout: '20s' })).resign()
    await waitUntil(async () => (await electionRows('killed')).length === 0, 'the long-ended row retired', {
      withinMs: 30_000,
    })
    const next = await client().election('killed').campaign({ timeout: '20s' })
    assert.ok(next.term > killed.term, `term ${next.term} after the retired ${killed.term}`)
    await next.resign()
  })

  it('with createTable off, a missing elections table is an error giving its DDL', async () => {
    const url = new URL(store.url())
    url.searchParams.set('table', 'elect_nocreate')
    url.searchParams.set('createTable', 'false')
    const strict = createLockClient(url.toString())
    open.push(strict)
    await assert.rejects(
      strict.election('x').campaign({ timeout: '5s' }),
      (error: Error) =>
        /^The elections table \S*elect_nocreate_elections\S* does not exist/.test(error.message) &&
        /CREATE TABLE/.test(error.message) &&
        /value VARBINARY/.test(error.message),
    )
  })

  it('offers no watch: observers read once a second (the doorbell wakes only at releases)', async () => {
    const backend = await fromUrl(new URL(store.url()))
    try {
      assert.ok(backend.election, 'MySQL offers elections')
      assert.equal(backend.election.watch, undefined)
    } finally {
      await backend.close()
    }
  })
})
