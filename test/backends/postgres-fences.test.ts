/**
 * PostgreSQL fences outlive the lock rows: an operator's DELETE or TRUNCATE (the kit's `deleteState`),
 * the table dropped and made again, the sequence dropped, and a table made by an earlier version (fences
 * from its rows alone, no sequence) upgraded on first use, by many clients at once. The fence guard that
 * docs/backends/postgres.md gives still holds with these fences.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import postgres from 'postgres'
import { fromUrl, guardedUpdate } from '../../src/backends/postgres/index.js'
import {
  advisoryClass,
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  fenceSequence,
  qualified,
  tableDdl,
} from '../../src/backends/postgres/layout.js'
import { createLockClient, type LockClient } from '../../src/index.js'
import type { KitStore } from '../kits/kit.js'
import { adminQuery, postgresKit } from '../kits/postgres.js'
import type { PostgresServer } from '../servers/postgres.js'
import { startPostgres } from '../servers/postgres.js'
import { waitUntil } from '../support/wait.js'

const LAYOUT = { schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }
const TABLE = qualified(LAYOUT)
const SEQUENCE = qualified(fenceSequence(LAYOUT))

describe('postgres: fences outlive the rows (the kit deletes state)', { timeout: 180_000 }, () => {
  let store: KitStore
  const open: LockClient[] = []
  const client = () => {
    const c = createLockClient(store.url(), { ttl: '5s' })
    open.push(c)
    return c
  }
  before(async () => {
    store = await postgresKit.start()
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await store.close()
  })

  /** Grants `key` once (released at once) and returns its fence. */
  const grant = async (locks: LockClient, key: string) => {
    const lock = await locks.acquire(key, { timeout: '20s' })
    await lock.release()
    return lock.fence
  }

  it("a DELETE of the key's row (deleteState(key)) between grants: the next fence is larger", async () => {
    const locks = client()
    const first = await grant(locks, 'deleted')
    await store.deleteState!('deleted')
    const left = await admin(`SELECT count(*)::int AS n FROM ${TABLE} WHERE name = 'deleted'`)
    assert.equal(left[0]!.n, 0, 'the row is gone')
    const second = await grant(locks, 'deleted')
    assert.ok(second > first, `fence ${second} after the DELETE, ${first} before`)
  })

  it('a TRUNCATE of the table (deleteState()) between grants: every next fence is larger', async () => {
    const locks = client()
    const before = [await grant(locks, 'a'), await grant(locks, 'b')]
    // One held across it: its holder loses the row, the next holder's fence is still larger.
    const held = await locks.acquire('held')
    await store.deleteState!()
    const after = [await grant(locks, 'a'), await grant(locks, 'b')]
    assert.ok(after[0]! > before[0]! && after[1]! > before[1]!, `${after} after, ${before} before`)
    const next = await client().acquire('held', { timeout: '20s' })
    assert.ok(next.fence > held.fence)
    await next.release()
    await held.release().catch(() => {})
  })

  it('the table dropped: a new client and the running one make it again, the next fences are larger', async () => {
    const running = client()
    const first = await grant(running, 'dropped')
    await admin(`DROP TABLE ${TABLE}`)
    // A client that starts now makes the table again (createTable), beside the sequence that outlived it.
    const second = await grant(client(), 'dropped')
    assert.ok(second > first, `fence ${second} after DROP TABLE, ${first} before`)
    await admin(`DROP TABLE ${TABLE}`)
    // The running client meets the missing table once (an error naming it), then checks and makes it again.
    await assert.rejects(running.acquire('dropped', { timeout: '5s' }), /fencelock_locks.*does not exist/)
    const third = await grant(running, 'dropped')
    assert.ok(third > second, `fence ${third} after the second DROP TABLE, ${second} before`)
  })

  it('a grant waiting for the row while another grant commits and an operator deletes the row: larger', async () => {
    const locks = client()
    await grant(locks, 'race')
    const sql = postgres(store.url(), { max: 1, onnotice: () => {} })
    try {
      // A transaction that stands for a concurrent grant (its locks as an acquire takes them: the key's
      // advisory lock, then the row): it draws a fence, and then the row is deleted (here in the same
      // transaction) while our acquire waits.
      const tx = await sql.reserve()
      try {
        await tx.unsafe('BEGIN')
        await tx.unsafe(`SELECT pg_advisory_xact_lock(${advisoryClass(LAYOUT)}, hashtext('race'))`)
        await tx.unsafe(`SELECT 1 FROM ${TABLE} WHERE name = 'race' FOR UPDATE`)
        const waiting = locks.acquire('race', { timeout: '30s' })
        waiting.catch(() => {})
        await waitUntil(
          async () => (await admin('SELECT 1 FROM pg_locks WHERE NOT granted')).length > 0,
          'the acquire waiting for the row',
          { withinMs: 20_000 },
        )
        const drawn = await tx.unsafe(`SELECT nextval('${SEQUENCE}')::text AS fence`)
        await tx.unsafe(`DELETE FROM ${TABLE} WHERE name = 'race'`)
        await tx.unsafe('COMMIT')
        const lock = await waiting
        const other = BigInt(drawn[0]!.fence as string)
        assert.ok(lock.fence > other, `fence ${lock.fence} after a grant with fence ${other} and a DELETE`)
        await lock.release()
      } finally {
        tx.release()
      }
    } finally {
      await sql.end({ timeout: 1 })
    }
  })

  it('the sequence and the table dropped: the new sequence starts past the old fences (server clock)', async () => {
    const first = await grant(client(), 'both')
    await admin(`DROP TABLE ${TABLE}; DROP SEQUENCE ${SEQUENCE}`)
    const second = await grant(client(), 'both')
    assert.ok(second > first, `fence ${second} after both were dropped, ${first} before`)
  })

  /** A statement as the superuser, on the kit's server. */
  const admin = (text: string) => {
    const sql = postgres(store.url(), { max: 1, onnotice: () => {} })
    return sql.unsafe(text).finally(() => sql.end({ timeout: 1 }))
  }
})

describe(
  'postgres: a table of an earlier version (no sequence) is upgraded on first use',
  { timeout: 180_000 },
  () => {
    let server: PostgresServer
    before(async () => {
      server = await startPostgres()
    })
    after(() => server.destroy())

    it('many clients at once: one sequence, fences past the old ones, and past them again after a DELETE', async () => {
      await adminQuery(server, tableDdl({ schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }))
      await adminQuery(
        server,
        `INSERT INTO ${TABLE} (name, owner, fence, expires_at, released) VALUES ('old', 'gone', 5000, 'epoch', true), ('other', 'gone', 70000, 'epoch', true)`,
      )
      const clients = Array.from({ length: 5 }, () => createLockClient(server.url(), { ttl: '5s' }))
      try {
        const locks = await Promise.all(clients.map((c, i) => c.acquire(i === 0 ? 'old' : `new:${i}`)))
        const old = locks[0]!
        assert.ok(old.fence > 5000n, `the old row's next fence ${old.fence}`)
        for (const lock of locks.slice(1)) assert.ok(lock.fence > 70_000n, `a new key's fence ${lock.fence}`)
        await Promise.all(locks.map((lock) => lock.release()))
        const sequences = await adminQuery<{ n: number }>(
          server,
          "SELECT count(*)::int AS n FROM pg_sequences WHERE sequencename LIKE 'fencelock%'",
        )
        assert.equal(sequences[0]!.n, 1)
        await adminQuery(server, `DELETE FROM ${TABLE} WHERE name = 'old'`)
        const again = await clients[1]!.acquire('old')
        assert.ok(again.fence > old.fence, `fence ${again.fence} after the DELETE, ${old.fence} before`)
        await again.release()
      } finally {
        await Promise.all(clients.map((c) => c.close()))
      }
    })

    it('with createTable=false an old table is not changed: the error and doctor name the sequence', async () => {
      const old = { schema: DEFAULT_SCHEMA, table: 'old_locks' }
      await adminQuery(server, tableDdl(old))
      const url = server.url('?table=old_locks&createTable=false')
      const locks = createLockClient(url)
      try {
        await assert.rejects(locks.acquire('k', { timeout: '5s' }), (error: Error) => {
          assert.match(error.message, /old_locks_fence.*does not exist.*fencelock doctor/s)
          return true
        })
        const backend = await fromUrl(new URL(url))
        try {
          const findings = await backend.doctor!(AbortSignal.timeout(10_000))
          assert.ok(
            findings.some(
              (f) =>
                f.level === 'error' &&
                /old_locks_fence.*createTable is off.*CREATE SEQUENCE/s.test(f.message),
            ),
            JSON.stringify(findings),
          )
        } finally {
          await backend.close()
        }
        const sequences = await adminQuery(
          server,
          "SELECT 1 FROM pg_sequences WHERE sequencename = 'old_locks_fence'",
        )
        assert.equal(sequences.length, 0, 'nothing was created')
      } finally {
        await locks.close()
      }
    })

    it('the documented fence guard, with these fences as bigint parameters', async () => {
      const sql = postgres(server.url(), { max: 2, onnotice: () => {} })
      const locks = createLockClient(server.url(), { ttl: 500 })
      try {
        await sql.unsafe('CREATE TABLE report (id int PRIMARY KEY, body text)')
        await sql.unsafe('ALTER TABLE report ADD COLUMN fence bigint')
        await sql.unsafe("INSERT INTO report VALUES (7, 'empty', NULL)")
        const write = async (body: string, fence: bigint) => {
          const rows = await sql.unsafe(
            'UPDATE report SET body = $1, fence = $2 WHERE id = $3 AND (fence IS NULL OR fence <= $2)',
            [body, fence as never, 7],
          )
          return rows.count
        }
        const stale = await locks.acquire('report:7', { renew: false })
        assert.ok(stale.fence > 2n ** 31n, `fences are past 32 bits: ${stale.fence}`)
        assert.equal(await write('first', stale.fence), 1)
        const next = await locks.acquire('report:7', { timeout: '10s' })
        assert.equal(await write('second', next.fence), 1)
        assert.equal(await write('again', next.fence), 1, 'a holder may write more than once')
        assert.equal(await write('stale', stale.fence), 0, 'the stale holder is refused')
        assert.equal(
          await guardedUpdate(sql, {
            table: 'report',
            set: { body: 'x' },
            where: { id: 7 },
            fence: stale.fence,
          }),
          false,
        )
        await next.release()
      } finally {
        await locks.close()
        await sql.end({ timeout: 1 })
      }
    })
  },
)
