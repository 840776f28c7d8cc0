/**
 * Semaphores on a sql-lease store (PostgreSQL, MySQL/MariaDB), as the store sees them (the conformance
 * cases see them through the API only): the two tables beside the lock table and their rows, a lock and a
 * semaphore of one name apart, the server's clock deciding expiry, the rows gone when idle (a crashed
 * holder's too), sequences that keep growing after the rows were deleted, doctor naming the tables, and a
 * grant whose commit was never confirmed undone when its acquire gives up.
 * Each backend's test file supplies a `SqlSemaphoreTarget` on its real server.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { DoctorFinding } from '../../../src/core/backend.js'
import { type ClientOptions, type LockClient, LockLostError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { waitUntil } from '../../support/wait.js'
import { givenUpAfterLostCommit } from './lost-commit.js'

/** A semaphore's row as stored: its limit and its latest sequence. */
export interface SemaphoreRow {
  readonly permit_limit: number
  readonly last_sequence: string
}

/** A grant's or a place's row as stored. */
export interface PermitRow {
  readonly owner: string
  readonly permits: number
  readonly granted: boolean
  readonly sequence: string
}

export interface SqlSemaphoreTarget {
  /** A new client of the store, closed after the block. */
  client(options?: ClientOptions): LockClient
  /** The semaphores table and the permits table, as the store's messages name them. */
  readonly tables: { readonly semaphores: string; readonly permits: string }
  /** `name`'s row in the semaphores table. */
  semaphoreRows(name: string): Promise<SemaphoreRow[]>
  /** `name`'s rows in the permits table, by sequence. */
  permitRows(name: string): Promise<PermitRow[]>
  /** Ends the leases of `name`'s grants a second ago on the server's clock. */
  endLeases(name: string): Promise<void>
  /** Empties both tables, as an operator would. */
  truncate(): Promise<void>
  /** Writes what a holder of `name` that crashed leaves: limit 1, a grant of sequence 7 ended a second ago. */
  leaveCrashedHolder(name: string): Promise<void>
  /** The backend's doctor findings. */
  doctor(signal: AbortSignal): Promise<DoctorFinding[]>
  /** The server's port, and the store's URL through a proxy on `port` in front of it. */
  readonly port: number
  urlVia(port: number): string
  /** Whether a chunk a client sends is the COMMIT of its transaction, as the wire protocol carries it. */
  isCommit(chunk: Buffer): boolean
}

/** A liveness bound on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 50 }

export function semaphoreTests(target: () => SqlSemaphoreTarget): void {
  const client = (options: ClientOptions = {}) => target().client({ ttl: '20s', ...options })
  const semRows = (name: string) => target().semaphoreRows(name)
  const permitRows = (name: string) => target().permitRows(name)

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
    await target().endLeases('server-clock')
    const next = await b.semaphore('server-clock', { limit: 1 }).tryAcquire()
    assert.ok(next, 'the ended grant no longer counted')
    assert.ok(next.sequence > stale.sequence)
    await assert.rejects(stale.extend(), LockLostError)
    await next.release()
  })

  it("an ended grant is not revived by its holder's next renewal (no one asked in between)", async () => {
    // As the mutex's extend since s11-me: the server ended the lease, so its permit was free in between;
    // the holder must hear that it lost it, not have it silently brought back.
    const locks = client({ renew: false })
    const stale = await locks.semaphore('revive', { limit: 1 }).acquire({ timeout: '20s' })
    await target().endLeases('revive')
    await assert.rejects(stale.extend(), LockLostError)
    const next = await client().semaphore('revive', { limit: 1 }).tryAcquire()
    assert.ok(next, 'the ended grant must leave its permit free')
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
    await target().truncate()
    const third = await sem.acquire({ timeout: '20s' })
    assert.ok(third.sequence > second.sequence, `${third.sequence} after ${second.sequence}`)
    await third.release()
    await second.release().catch(() => {})
  })

  it("a crashed holder's rows are deleted by a later grant's housekeeping", async () => {
    // What a holder that crashed (no release, no renewal) leaves: its rows, its lease ended on the server.
    await target().leaveCrashedHolder('crashed')
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
    await givenUpAfterLostCommit(target(), {
      acquire: (locks, signal) =>
        locks.semaphore('lost-reply', { limit: 1 }).acquire({ timeout: '120s', signal }),
      committed: async () => (await permitRows('lost-reply')).some((row) => row.granted),
      undone: async () => (await permitRows('lost-reply')).length === 0,
    })
    const last = await client().semaphore('lost-reply', { limit: 1 }).tryAcquire()
    assert.ok(last, 'the only permit is free')
    await last.release()
  })

  it('doctor names the semaphore tables', async () => {
    await client().semaphore('doctor', { limit: 1 }).inspect()
    const { semaphores, permits } = target().tables
    const findings = await target().doctor(AbortSignal.timeout(20_000))
    const found = findings.find((f) => f.message.includes(semaphores))
    assert.ok(found, `a finding on ${semaphores}: ${JSON.stringify(findings)}`)
    assert.ok(found.message.includes(permits))
    assert.equal(found.level, 'ok')
  })
}
