/**
 * Read-write locks on a sql-lease store (PostgreSQL, MySQL/MariaDB), as the store sees them (the conformance
 * cases see them through the API only): the two tables beside the lock table and their rows, a lock and a
 * read-write lock of one name apart, downgrade rewriting the writer's own row, the server's clock deciding
 * expiry, the rows gone when idle (a crashed holder's too), fences that keep growing after the rows were
 * deleted, doctor naming the tables, and a grant whose commit was never confirmed undone when its acquire
 * gives up. Each backend's test file supplies a `SqlRwLockTarget` on its real server.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { DoctorFinding } from '../../../src/core/backend.js'
import { type ClientOptions, type LockClient, LockLostError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { waitUntil } from '../../support/wait.js'
import { givenUpAfterLostCommit } from './lost-commit.js'

/** A read-write lock's row as stored: its latest fence and its read epoch. */
export interface RwLockRow {
  readonly last_fence: string
  readonly epoch: string
}

/** A reader's or a writer's row as stored (`fence` null while it waits). */
export interface RwEntryRow {
  readonly owner: string
  readonly mode: string
  readonly place: string
  readonly fence: string | null
}

export interface SqlRwLockTarget {
  /** A new client of the store, closed after the block. */
  client(options?: ClientOptions): LockClient
  /** The rwlocks table and the entries table, as the store's messages name them. */
  readonly tables: { readonly rwlocks: string; readonly entries: string }
  /** `name`'s row in the rwlocks table. */
  lockRows(name: string): Promise<RwLockRow[]>
  /** `name`'s rows in the entries table, by place. */
  entryRows(name: string): Promise<RwEntryRow[]>
  /** Ends the leases of `name`'s entries a second ago on the server's clock. */
  endLeases(name: string): Promise<void>
  /** Empties both tables, as an operator would. */
  truncate(): Promise<void>
  /** Writes what a writer of `name` that crashed leaves: fence 7, its lease ended a second ago. */
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

export function rwlockTests(target: () => SqlRwLockTarget): void {
  const client = (options: ClientOptions = {}) => target().client({ ttl: '20s', ...options })
  const lockRows = (name: string) => target().lockRows(name)
  const entryRows = (name: string) => target().entryRows(name)
  const shape = async (name: string) =>
    (await entryRows(name)).map((row) => [row.owner, row.mode, row.fence !== null])

  it('a read-write lock is a row of <table>_rwlocks and one of <table>_rwlock_entries per reader or writer', async () => {
    const locks = client()
    const lock = await locks.acquire('rw-same-name', { timeout: '20s' })
    const reader = await locks.rwlock('rw-same-name').read({ timeout: '20s' })
    assert.deepEqual(
      [...(await lockRows('rw-same-name'))],
      [{ last_fence: String(reader.fence), epoch: String(reader.fence) }],
    )
    // A writer keeps a place in line (a row without a fence) while it waits.
    const other = client()
    const writing = awaitLater(other.rwlock('rw-same-name').write({ timeout: '60s' }))
    await waitUntil(async () => (await entryRows('rw-same-name')).length === 2, 'a place in line', WITHIN)
    const [, queued] = await entryRows('rw-same-name')
    assert.deepEqual(await shape('rw-same-name'), [
      [reader.owner, 'read', true],
      [queued!.owner, 'write', false],
    ])
    // The lock of the same name is apart, and list shows the lock only.
    const listed = []
    for await (const held of locks.list('rw-same-name')) listed.push(held.key)
    assert.deepEqual(listed, ['rw-same-name'])
    assert.equal((await locks.inspect('rw-same-name')).owner, lock.owner)
    await reader.release()
    const writer = await writing
    assert.ok(writer.fence > reader.fence)
    assert.deepEqual(await shape('rw-same-name'), [[writer.owner, 'write', true]])
    await writer.release()
    await lock.release()
  })

  it("downgrade rewrites the writer's own row: its place and fence kept, its mode read", async () => {
    const locks = client()
    const writer = await locks.rwlock('rw-downgrade').write({ timeout: '20s' })
    const [before] = await entryRows('rw-downgrade')
    const reader = await writer.downgrade()
    const after = await entryRows('rw-downgrade')
    assert.deepEqual([...after], [{ ...before!, mode: 'read' }])
    assert.equal(reader.fence, writer.fence)
    // A reader after it starts a new epoch, above the downgraded writer's fence.
    const joined = await client().rwlock('rw-downgrade').tryRead()
    assert.ok(joined && joined.fence > writer.fence)
    await joined.release()
    await reader.release()
  })

  it("the server's clock ends a lease: an entry whose end passed on the server frees the lock", async () => {
    const [a, b] = [client(), client()]
    const stale = await a.rwlock('rw-server-clock').write({ timeout: '20s' })
    // The holder's lease has 20 s left on its own clock; on the server's it ended.
    await target().endLeases('rw-server-clock')
    const next = await b.rwlock('rw-server-clock').tryWrite()
    assert.ok(next, 'the ended writer no longer counted')
    assert.ok(next.fence > stale.fence)
    await assert.rejects(stale.extend(), LockLostError)
    await next.release()
  })

  it("an ended lease is not revived by its holder's next renewal (no one asked in between)", async () => {
    // As the mutex's extend since s11-me: the server ended the lease, so the name was free in between
    // (inspect said so); the holder must hear that it lost it, not have it silently brought back.
    const locks = client({ renew: false })
    const stale = await locks.rwlock('rw-revive').write({ timeout: '20s' })
    await target().endLeases('rw-revive')
    assert.deepEqual((await locks.rwlock('rw-revive').inspect()).holders, [])
    await assert.rejects(stale.extend(), LockLostError)
    const next = await client().rwlock('rw-revive').tryWrite()
    assert.ok(next, 'the ended lease must leave the name free')
    assert.ok(next.fence > stale.fence)
    await next.release()
  })

  it('an idle read-write lock leaves no row, and its next fence is still greater', async () => {
    const rw = client().rwlock('rw-idle')
    const first = await rw.write({ timeout: '20s' })
    await first.release()
    assert.deepEqual([...(await lockRows('rw-idle'))], [])
    assert.deepEqual([...(await entryRows('rw-idle'))], [])
    assert.deepEqual((await rw.inspect()).holders, [])
    const second = await rw.read({ timeout: '20s' })
    assert.ok(second.fence > first.fence, `${second.fence} after ${first.fence}`)
    // Also after an operator emptied both tables.
    await target().truncate()
    const third = await rw.write({ timeout: '20s' })
    assert.ok(third.fence > second.fence, `${third.fence} after ${second.fence}`)
    await third.release()
    await second.release().catch(() => {})
  })

  it("a crashed holder's rows are deleted by a later grant's housekeeping", async () => {
    await target().leaveCrashedHolder('rw-crashed')
    // A new client's first grant (of another name) retires the idle locks whose entries all ended.
    const later = client()
    const other = await later.rwlock('rw-crashed-other').write({ timeout: '20s' })
    await waitUntil(
      async () => (await lockRows('rw-crashed')).length === 0,
      "the crashed holder's rows gone",
      WITHIN,
    )
    assert.deepEqual([...(await entryRows('rw-crashed'))], [])
    await other.release()
  })

  it('an acquire given up after its commit reply was lost leaves nothing held', async () => {
    // The server commits the grant, the reply never arrives, the connection breaks (the attempt fails, its
    // outcome unknown) and the caller gives up: the core's clean-up must delete that grant, not leave it
    // holding the lock for the whole lease.
    await givenUpAfterLostCommit(target(), {
      acquire: (locks, signal) => locks.rwlock('rw-lost-reply').write({ timeout: '120s', signal }),
      committed: async () => (await entryRows('rw-lost-reply')).some((row) => row.fence !== null),
      undone: async () => (await entryRows('rw-lost-reply')).length === 0,
    })
    const last = await client().rwlock('rw-lost-reply').tryWrite()
    assert.ok(last, 'the lock is free')
    await last.release()
  })

  it('doctor names the read-write lock tables', async () => {
    await client().rwlock('rw-doctor').inspect()
    const { rwlocks, entries } = target().tables
    const findings = await target().doctor(AbortSignal.timeout(20_000))
    const found = findings.find((f) => f.message.includes(rwlocks))
    assert.ok(found, `a finding on ${rwlocks}: ${JSON.stringify(findings)}`)
    assert.ok(found.message.includes(entries))
    assert.equal(found.level, 'ok')
  })
}
