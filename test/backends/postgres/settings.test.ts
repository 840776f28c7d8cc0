/**
 * PostgreSQL under session defaults other than the server's own: the statements pin their isolation (a
 * contended statement under REPEATABLE READ or SERIALIZABLE failed with SQLSTATE 40001; SERIALIZABLE's
 * predicate locks failed acquires of other keys too), and `doctor` reports the settings. The conformance
 * suite runs whole under them too (kits postgres-serializable and postgres-repeatable-read).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import postgres from 'postgres'
import { postgresBackend } from '../../../src/backends/postgres/index.js'
import { createLockClient, type Lock, type LockClient } from '../../../src/index.js'
import { type PostgresServer, startPostgres } from '../../servers/postgres.js'

for (const isolation of ['serializable', 'repeatable read']) {
  describe(`postgres: default_transaction_isolation = ${isolation}`, { timeout: 180_000 }, () => {
    let server: PostgresServer
    const open: LockClient[] = []
    before(async () => {
      server = await startPostgres({ settings: { default_transaction_isolation: isolation } })
    })
    after(async () => {
      await Promise.all(open.map((c) => c.close()))
      await server.destroy()
    })
    const clients = (n: number) => {
      const made = Array.from({ length: n }, () => createLockClient(server.url(), { ttl: '10s' }))
      open.push(...made)
      return made
    }

    it('a contended tryAcquire returns null (never an error), one grant at a time', async () => {
      const contenders = clients(6)
      let granted = 0
      for (let round = 0; round < 25; round++) {
        // All at once, on a row just released (or, in the first round, not there yet): the statements
        // meet a row another one changed after they began.
        const got = await Promise.all(contenders.map((c) => c.tryAcquire('hot')))
        const winners = got.filter((lock): lock is Lock => lock !== null)
        assert.ok(winners.length <= 1, `round ${round}: ${winners.length} holders at once`)
        granted += winners.length
        await Promise.all(winners.map((lock) => lock.release()))
      }
      assert.ok(granted > 0, 'some round granted the lock')
    })

    it('acquires of distinct free keys at the same moment are all granted', async () => {
      const contenders = clients(6)
      for (let round = 0; round < 15; round++) {
        const got = await Promise.all(contenders.map((c, i) => c.tryAcquire(`free:${round}:${i}`)))
        assert.deepEqual(
          got.map((lock) => lock !== null),
          contenders.map(() => true),
          `round ${round}: a free key was refused`,
        )
        await Promise.all(got.map((lock) => lock?.release()))
      }
    })
  })
}

describe('postgres: a session changed by a SET after the defaults were read', { timeout: 180_000 }, () => {
  let server: PostgresServer
  before(async () => {
    server = await startPostgres()
  })
  after(() => server.destroy())

  it('meets 40001 once, sends the statement again pinned, and pins from then on', async () => {
    // One connection per instance, so that the SET reaches the connection every statement uses.
    const instances = Array.from({ length: 6 }, () => postgres(server.url(), { max: 1, onnotice: () => {} }))
    const clients = instances.map((sql) => createLockClient(postgresBackend({ sql }), { ttl: '10s' }))
    try {
      // First use: the defaults are read (READ COMMITTED: prepared statements, no pin).
      await Promise.all(clients.map(async (c, i) => (await c.tryAcquire(`first:${i}`))?.release()))
      await Promise.all(
        instances.map((sql) => sql.unsafe("SET default_transaction_isolation = 'repeatable read'")),
      )
      let granted = 0
      for (let round = 0; round < 25; round++) {
        const got = await Promise.all(clients.map((c) => c.tryAcquire('changed')))
        const winners = got.filter((lock): lock is Lock => lock !== null)
        assert.ok(winners.length <= 1, `round ${round}: ${winners.length} holders at once`)
        granted += winners.length
        await Promise.all(winners.map((lock) => lock.release()))
      }
      assert.ok(granted > 0, 'some round granted the lock')
    } finally {
      await Promise.all(clients.map((c) => c.close()))
      await Promise.all(instances.map((sql) => sql.end({ timeout: 1 })))
    }
  })
})

describe('postgres: doctor reports the session settings', { timeout: 120_000 }, () => {
  let server: PostgresServer
  before(async () => {
    server = await startPostgres({
      settings: { default_transaction_isolation: 'serializable', TimeZone: 'Pacific/Chatham' },
    })
  })
  after(() => server.destroy())

  it('names the isolation level it meets and says the statements pin their own', async () => {
    const sql = postgres(server.url(), { max: 2, onnotice: () => {} })
    try {
      const findings = await postgresBackend({ sql }).doctor!(AbortSignal.timeout(20_000))
      const settings = findings.find((f) => /default_transaction_isolation/.test(f.message))
      assert.ok(settings, JSON.stringify(findings))
      assert.match(settings.message, /default_transaction_isolation = serializable/)
      assert.match(settings.message, /TimeZone = Pacific\/Chatham/)
      assert.match(settings.message, /pins READ COMMITTED/)
    } finally {
      await sql.end({ timeout: 1 })
    }
  })
})
