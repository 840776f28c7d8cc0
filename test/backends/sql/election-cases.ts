/**
 * Elections on a sql-lease store (PostgreSQL, MySQL/MariaDB), as the store sees them (the conformance
 * cases see them through the API only): the elections table beside the lock table and its rows, a lock and
 * an election of one name apart, a proclaim refused on the store after a takeover, terms past a resign, an
 * operator's DELETE and a retired row, and the DDL when the table may not be made. Each backend's test file
 * supplies a `SqlElectionTarget` on its real server.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { type ClientOptions, createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { waitUntil } from '../../support/wait.js'

/** An election's row as stored: its owner, its term (the fence) and its value. */
export interface ElectionRow {
  readonly owner: string
  readonly fence: string
  readonly value: string
}

export interface SqlElectionTarget {
  /** The store's URL, with `query` (`?table=…`). */
  url(query?: string): string
  /** A new client of the store, closed after the block. */
  client(options?: ClientOptions): LockClient
  /** `name`'s rows in the elections table. */
  electionRows(name: string): Promise<ElectionRow[]>
  /** The owners of `name`'s rows in the lock table. */
  lockOwners(name: string): Promise<string[]>
  /** Ends `name`'s election lease on the server's clock, `longAgo`: past the retiring margin. */
  expire(name: string, longAgo: boolean): Promise<void>
  /** Deletes `name`'s election row, as an operator would. */
  deleteRow(name: string): Promise<void>
  /** Whether a resign deletes the row (PostgreSQL) rather than marking it released (MySQL). */
  readonly resignDeletes: boolean
  /** The value column as the DDL in the createTable-off error gives it. */
  readonly valueColumn: RegExp
}

export function electionTests(target: () => SqlElectionTarget): void {
  const client = (options: ClientOptions = {}) => target().client({ ttl: '20s', ...options })

  it('an election is a row of <table>_elections with its value; a lock of the same name is apart', async () => {
    const locks = client()
    const lock = await locks.acquire('same-name', { timeout: '20s' })
    const lead = await locks
      .election('same-name')
      .campaign({ value: 'http://[::1]:8080/é 🗳', timeout: '20s' })
    assert.deepEqual(
      [...(await target().electionRows('same-name'))],
      [{ owner: lead.owner, fence: String(lead.term), value: 'http://[::1]:8080/é 🗳' }],
    )
    assert.deepEqual(await target().lockOwners('same-name'), [lock.owner])
    // Releasing the lock leaves the leadership; resigning ends the election's row alone.
    await lock.release()
    const view = await locks.election('same-name').leader()
    assert.ok(view.leader && view.owner === lead.owner, 'releasing the lock leaves the leadership')
    await lead.resign()
    assert.equal((await locks.election('same-name').leader()).leader, false)
    if (target().resignDeletes) assert.equal((await target().electionRows('same-name')).length, 0)
    assert.equal((await locks.inspect('same-name')).held, false)
  })

  it("a leader replaced after its lease cannot proclaim: the store keeps its successor's value", async () => {
    const old = await client({ ttl: '5s', renew: false })
      .election('takeover')
      .campaign({ value: 'old', timeout: '20s' })
    // Its lease ended on the server's clock (a leader paused past its lease).
    await target().expire('takeover', false)
    const next = await client().election('takeover').campaign({ value: 'next', timeout: '20s' })
    assert.ok(next.term > old.term)
    await assert.rejects(old.proclaim('late'), LockLostError)
    assert.deepEqual(
      (await target().electionRows('takeover')).map((r) => r.value),
      ['next'],
    )
    await next.resign()
  })

  it("terms keep growing past a resign, an operator's DELETE and a killed leader's retired row", async () => {
    const locks = client({ ttl: '5s', renew: false })
    const first = await locks.election('terms').campaign({ timeout: '20s' })
    await first.resign()
    const vacant = await locks.election('terms').leader()
    assert.ok(!vacant.leader && vacant.term !== undefined && vacant.term >= first.term)
    const second = await locks.election('terms').campaign({ timeout: '20s' })
    assert.ok(second.term > first.term, `term ${second.term} after ${first.term}`)
    await target().deleteRow('terms')
    // Killed: it never renews nor resigns (its client is left open, never used again).
    const killed = await locks.election('terms').campaign({ timeout: '20s' })
    assert.ok(killed.term > second.term, `term ${killed.term} after the deleted ${second.term}`)
    // Its lease ended long ago on the server's clock; a fresh client's first grant of an election runs
    // the elections table's housekeeping, which retires it.
    await target().expire('terms', true)
    await (await client().election(`terms-other:${Math.random()}`).campaign({ timeout: '20s' })).resign()
    await waitUntil(
      async () => (await target().electionRows('terms')).length === 0,
      'the long-ended row retired',
      { withinMs: 30_000 },
    )
    const next = await client().election('terms').campaign({ timeout: '20s' })
    assert.ok(next.term > killed.term, `term ${next.term} after the retired ${killed.term}`)
    await next.resign()
  })

  it('with createTable off, a missing elections table is an error giving its DDL', async () => {
    const strict = createLockClient(target().url('?table=elect_nocreate&createTable=false'))
    try {
      await assert.rejects(
        strict.election('x').campaign({ timeout: '5s' }),
        (error: Error) =>
          /^The elections table \S*elect_nocreate_elections\S* does not exist/.test(error.message) &&
          /CREATE TABLE/.test(error.message) &&
          target().valueColumn.test(error.message),
      )
    } finally {
      await strict.close()
    }
  })
}
