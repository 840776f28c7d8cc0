/**
 * PostgreSQL semaphores, as the store sees them (the conformance cases see them through the API only): the
 * two tables beside the lock table and their rows, a lock and a semaphore of one name apart, the server's
 * clock deciding expiry, the rows gone when idle (a crashed holder's too), sequences that keep growing
 * after the rows were deleted, and a grant whose commit was never confirmed undone when its acquire gives up.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import postgres from 'postgres'
import { postgresBackend } from '../../../src/backends/postgres/index.js'
import {
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  permitsTable,
  qualified,
  semaphoresTable,
} from '../../../src/backends/postgres/layout.js'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import type { KitStore } from '../../kits/kit.js'
import { postgresKit } from '../../kits/postgres.js'
import { awaitLater } from '../../support/later.js'
import { startProxy } from '../../support/proxy.js'
import { waitUntil } from '../../support/wait.js'

const T = { schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }
const SEMAPHORES = qualified(semaphoresTable(T))
const PERMITS = qualified(permitsTable(T))
/** A liveness bound on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 50 }

describe('postgres: semaphores on the store', { timeout: 240_000 }, () => {
  let store: KitStore
  let sql: postgres.Sql
  const open: LockClient[] = []
  const client = (options: { ttl?: string; renew?: boolean } = {}) => {
    const c = createLockClient(store.url(), { ttl: '20s', ...options })
    open.push(c)
    return c
  }
  const admin = <T>(text: string, params: string[] = []) =>
    sql.unsafe(text, params) as unknown as Promise<T[]>
  const semRows = (name: string) =>
    admin<{ permit_limit: number; last_sequence: string }>(
      `SELECT permit_limit, last_sequence::text AS last_sequence FROM ${SEMAPHORES} WHERE name = $1`,
      [name],
    )
  const permitRows = (name: string) =>
    admin<{ owner: string; permits: number; granted: boolean; sequence: string }>(
      `SELECT owner, permits, granted, sequence::text AS sequence FROM ${PERMITS} WHERE name = $1 ORDER BY sequence`,
      [name],
    )

  before(async () => {
    store = await postgresKit.start()
    sql = postgres(store.url(), { onnotice: () => {}, fetch_types: false })
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})))
    await sql?.end({ timeout: 1 })
    await store?.close()
  })

  it('a semaphore is a row of <table>_semaphores and one of <table>_permits per grant or place', async () => {
    const locks = client()
    const lock = await locks.acquire('same-name', { timeout: '20s' })
    const two = await locks.semaphore('same-name', { limit: 3 }).acquire({ permits: 2, timeout: '20s' })
    assert.deepEqual(
      [...(await semRows('same-name'))],
      [{ permit_limit: 3, last_sequence: String(two.sequence) }],
    )
    assert.deepEqual(
      [...(await permitRows('same-name'))],
      [{ owner: two.owner, permits: 2, granted: true, sequence: String(two.sequence) }],
    )
    // A waiter for 2 keeps a place in line (a row not granted) while it waits.
    const other = client()
    const waiting = awaitLater(
      other.semaphore('same-name', { limit: 3 }).acquire({ permits: 2, timeout: '60s' }),
    )
    await waitUntil(
      async () => (await permitRows('same-name')).some((row) => !row.granted),
      'a place in line',
      WITHIN,
    )
    // The lock of the same name is apart, and list shows the lock only.
    const listed = []
    for await (const held of locks.list('same-name')) listed.push(held.key)
    assert.deepEqual(listed, ['same-name'])
    assert.equal((await locks.inspect('same-name')).owner, lock.owner)
    await two.release()
    const granted = await waiting
    assert.deepEqual(
      (await permitRows('same-name')).map((row) => [row.owner, row.granted]),
      [[granted.owner, true]],
    )
    await granted.release()
    await lock.release()
  })

  it("the server's clock ends a lease: a grant whose end passed on the server frees its permits", async () => {
    const [a, b] = [client(), client()]
    const stale = await a.semaphore('server-clock', { limit: 1 }).acquire({ timeout: '20s' })
    // The holder's lease has 20 s left on its own clock; on the server's it ended.
    await admin(
      `UPDATE ${PERMITS} SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`,
      ['server-clock'],
    )
    const next = await b.semaphore('server-clock', { limit: 1 }).tryAcquire()
    assert.ok(next, 'the ended grant no longer counted')
    assert.ok(next.sequence > stale.sequence)
    await assert.rejects(stale.extend(), LockLostError)
    await next.release()
  })

  it('an idle semaphore leaves no row, and its next sequence is still greater', async () => {
    const locks = client()
    const sem = locks.semaphore('idle', { limit: 2 })
    const first = await sem.acquire({ timeout: '20s' })
    await first.release()
    assert.deepEqual([...(await semRows('idle'))], [])
    assert.deepEqual([...(await permitRows('idle'))], [])
    assert.equal((await sem.inspect()).held, 0)
    const second = await sem.acquire({ timeout: '20s' })
    assert.ok(second.sequence > first.sequence, `${second.sequence} after ${first.sequence}`)
    // Also after an operator emptied both tables.
    await admin(`TRUNCATE ${SEMAPHORES}, ${PERMITS}`)
    const third = await sem.acquire({ timeout: '20s' })
    assert.ok(third.sequence > second.sequence, `${third.sequence} after ${second.sequence}`)
    await third.release()
    await second.release().catch(() => {})
  })

  it("a crashed holder's rows are deleted by a later grant's housekeeping", async () => {
    // What a holder that crashed (no release, no renewal) leaves: its rows, its lease ended on the server.
    await admin(`INSERT INTO ${SEMAPHORES} (name, permit_limit, last_sequence) VALUES ($1, 1, 7)`, [
      'crashed',
    ])
    await admin(
      `INSERT INTO ${PERMITS} (name, owner, permits, granted, sequence, expires_at)
       VALUES ($1, 'gone', 1, true, 7, clock_timestamp() - interval '1 second')`,
      ['crashed'],
    )
    // A new client's first grant (of another semaphore) retires the idle semaphores whose grants ended.
    const later = client()
    const other = await later.semaphore('crashed-other', { limit: 1 }).acquire({ timeout: '20s' })
    await waitUntil(
      async () => (await semRows('crashed')).length === 0,
      "the crashed holder's rows gone",
      WITHIN,
    )
    assert.deepEqual([...(await permitRows('crashed'))], [])
    await other.release()
  })

  it('an acquire given up after its commit reply was lost leaves no permit held', async () => {
    // The server commits the grant, the reply never arrives, the connection breaks (the attempt fails, its
    // outcome unknown) and the caller gives up: the core's clean-up must delete that grant, not leave it
    // holding the only permit for the whole lease.
    const proxy = await startProxy(store.ports[0]!)
    const locks = createLockClient(store.urlVia!([proxy.port]), { ttl: '120s' })
    try {
      let commitSent = false
      proxy.filter = (chunk, direction) => {
        // A fresh client's first "commit" travels as text (a Parse message): from then on, replies are lost.
        if (!commitSent && direction === 'request' && chunk.toString('latin1').includes('\0commit\0')) {
          commitSent = true
          proxy.mode = 'drop-replies'
        }
        return true
      }
      const stop = new AbortController()
      const acquiring = awaitLater(
        locks.semaphore('lost-reply', { limit: 1 }).acquire({ timeout: '120s', signal: stop.signal }),
      )
      await waitUntil(
        async () => (await permitRows('lost-reply')).some((row) => row.granted),
        'the grant committed on the server',
        WITHIN,
      )
      stop.abort(new Error('given up'))
      proxy.filter = undefined
      proxy.mode = 'pass'
      proxy.cut()
      await assert.rejects(acquiring, /given up/)
      await waitUntil(
        async () => (await permitRows('lost-reply')).length === 0,
        'the unconfirmed grant deleted by the clean-up (its lease has 120 s)',
        WITHIN,
      )
      const last = await client().semaphore('lost-reply', { limit: 1 }).tryAcquire()
      assert.ok(last, 'the only permit is free')
      await last.release()
    } finally {
      await locks.close()
      await proxy.close()
    }
  })

  it('doctor names the semaphore tables', async () => {
    await client().semaphore('doctor', { limit: 1 }).inspect()
    const backend = postgresBackend({ sql })
    const findings = await backend.doctor!(AbortSignal.timeout(20_000))
    const found = findings.find((f) => f.message.includes(SEMAPHORES))
    assert.ok(found, `a finding on ${SEMAPHORES}: ${JSON.stringify(findings)}`)
    assert.ok(found.message.includes(PERMITS))
    assert.equal(found.level, 'ok')
  })
})
