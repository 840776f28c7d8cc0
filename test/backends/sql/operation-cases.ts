/**
 * `list` and `break` on a sql-lease store (PostgreSQL, MySQL/MariaDB), where the conformance case does not
 * reach: a break aimed at a fence racing a new grant, the next fence after a break, a break
 * waking a waiter whose poll would not, list paging through more locks than a page, and keys given back
 * exactly with a prefix taken as bytes (case, accents, `_`, `%`, `/`, a space). Each backend's test file
 * supplies a `SqlOperationsTarget` on its real server.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { it } from 'node:test'
import type { SqlAdapter, SqlLeaseOptions } from '../../../src/engines/sql/engine.js'
import {
  createLockClient,
  type ListedLock,
  type Lock,
  type LockBackend,
  type LockClient,
} from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'

export interface SqlOperationsTarget {
  /** A lock URL on the target's table. */
  url(): string
  /** A backend over a dialect of its own, which a test may spy on (closed with the client). */
  backend(options?: SqlLeaseOptions): { backend: LockBackend; dialect: SqlAdapter }
  /** Ends `key`'s lease on the server's clock (its row and fence kept), as a premature expiry would. */
  expire(key: string): Promise<void>
  /** `key`'s row as stored, or undefined when it has none. */
  row(key: string): Promise<{ released: boolean; fence: bigint } | undefined>
}

/** Keys in byte order (UTF-8), the order `list` reads them in. */
const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b))

async function keysOf(list: AsyncIterable<ListedLock>): Promise<string[]> {
  const keys: string[] = []
  for await (const lock of list) keys.push(lock.key)
  return keys
}

export function operationTests(target: () => SqlOperationsTarget): void {
  const open: LockClient[] = []
  const client = (urlOrBackend: string | LockBackend, ttl = '30s') => {
    const c = createLockClient(urlOrBackend, { ttl })
    open.push(c)
    return c
  }
  const key = (label: string) => `ops:${label}:${randomBytes(3).toString('hex')}`
  const closeAll = () => Promise.all(open.splice(0).map((c) => c.close().catch(() => {})))

  it('break frees the row as a release does (deleted, or marked released with its fence): the next grant is greater', async () => {
    try {
      const k = key('kept')
      const stuck = await client(target().url()).acquire(k)
      const operator = client(target().url())
      assert.equal((await operator.break(k)).broken, true)
      const row = await target().row(k)
      if (row !== undefined) {
        assert.equal(row.released, true)
        assert.equal(row.fence, stuck.fence, 'the broken grant’s fence stays in the row')
      }
      const next = await operator.acquire(k)
      assert.ok(next.fence > stuck.fence, `next fence ${next.fence} > broken ${stuck.fence}`)
      await next.release()
    } finally {
      await closeAll()
    }
  })

  it('a break aimed at a fence, racing a new grant, leaves the new holder alone', async () => {
    try {
      const k = key('race')
      const first = await client(target().url()).acquire(k)
      const { backend, dialect } = target().backend()
      const operator = client(backend)
      // Between the break's read and its statement: the lease read ends and `by` takes the key.
      const breakLease = dialect.breakLease.bind(dialect)
      const raceWith = (by: LockClient) => {
        const race: { taken?: Lock } = {}
        dialect.breakLease = async (...args) => {
          if (race.taken === undefined) {
            await target().expire(k)
            race.taken = await by.acquire(k, { timeout: '20s' })
          }
          return breakLease(...args)
        }
        return race
      }
      const second = raceWith(client(target().url()))
      const aimed = await operator.break(k, { fence: first.fence })
      const taken = second.taken
      assert.ok(taken !== undefined)
      assert.equal(aimed.broken, false, 'the new grant is not the one aimed at')
      assert.equal(aimed.lease?.fence, taken.fence)
      assert.equal(aimed.lease?.owner, taken.owner)
      assert.equal((await operator.inspect(k)).owner, taken.owner, 'the new holder keeps the key')
      assert.ok((await taken.extend('20s')) > 0, 'and renews it')
      assert.equal(taken.signal.aborted, false)

      // Unaimed, the same race still ends only the lease the break read: the grant made since is left alone,
      // and reported (a break never ends a lock it did not see).
      const third = raceWith(client(target().url()))
      const any = await operator.break(k)
      assert.ok(third.taken !== undefined)
      assert.equal(any.broken, false)
      assert.equal(any.lease?.fence, third.taken.fence, 'the lease reported is the one left alone')
      assert.ok(third.taken.fence > taken.fence)
      assert.equal((await operator.inspect(k)).owner, third.taken.owner, 'the new holder keeps the key')
    } finally {
      await closeAll()
    }
  })

  it('a break wakes a waiting acquire: not at its poll, nor at the lease’s end', async () => {
    try {
      const k = key('wake')
      // The stuck holder: one grant of a two-minute lease, never renewed nor released.
      const { backend: stuck } = target().backend()
      open.push(createLockClient(stuck))
      const owner = randomBytes(16).toString('hex')
      const signal = new AbortController().signal
      const grant = await stuck.tryAcquire({ key: k, owner, ttlMs: 120_000 }, signal)
      assert.equal(grant.granted, true)
      // The waiter would look again only at the lease's end (its poll is ten minutes).
      const { backend, dialect } = target().backend({ pollMaxMs: 600_000 })
      let refused!: () => void
      const wasRefused = new Promise<void>((resolve) => {
        refused = resolve
      })
      const acquire = dialect.acquire.bind(dialect)
      dialect.acquire = async (...args) => {
        const out = await acquire(...args)
        if (!out.granted) refused()
        return out
      }
      // Notifications: the waiter's client subscribes first (doctor does), so that its one refusal is
      // paced to the lease's end and nothing but the break's notification can wake it sooner.
      await backend.doctor?.(signal)
      const next = awaitLater(client(backend).acquire(k, { timeout: '90s' }))
      await wasRefused
      const broken = await client(target().url()).break(k)
      assert.equal(broken.broken, true)
      assert.equal(broken.lease?.owner, owner)
      // PostgreSQL notifies at once; a MySQL waiter wakes at its doorbell wait's bound (5 s): the bell
      // stays with the stuck holder's connection, which alone can free it.
      const lock = await next
      assert.ok(grant.granted && lock.fence > grant.fence)
      await lock.release()
    } finally {
      await closeAll()
    }
  })

  it('list reads 250 held locks a page (100) per statement, each once, in byte order', async () => {
    try {
      const base = key('pages')
      const keys = Array.from({ length: 250 }, (_, i) => `${base}/${String(i).padStart(3, '0')}`)
      const holder = client(target().url(), '120s')
      for (let i = 0; i < keys.length; i += 25) {
        await Promise.all(keys.slice(i, i + 25).map((k) => holder.acquire(k)))
      }
      const { backend, dialect } = target().backend()
      const listHeld = dialect.listHeld.bind(dialect)
      const pages: number[] = []
      dialect.listHeld = async (...args) => {
        const rows = await listHeld(...args)
        pages.push(rows.length)
        return rows
      }
      const found = await keysOf(client(backend).list(`${base}/`))
      assert.deepEqual(found, keys)
      assert.deepEqual(pages, [100, 100, 50], 'one statement per page')
    } finally {
      await closeAll()
    }
  })

  it('list gives keys back exactly, and a prefix is bytes: case, accents, _, %, /, space', async () => {
    try {
      const base = key('bytes')
      const inner = [
        'a b/ü',
        'Ünïcode',
        'ABC',
        'abc',
        'x_y',
        'x%y',
        'xzy',
        'é',
        'e',
        'E',
        '日本',
        '-z',
        '_',
        '%',
      ]
      const keys = inner.map((k) => `${base}/${k}`)
      const beside = [`${base}-x`, `${base}_`, `${base}`, `${base}%`]
      const holder = client(target().url(), '120s')
      await Promise.all([...keys, ...beside].map((k) => holder.acquire(k)))
      // Pages of two: every page boundary falls between keys a collation orders otherwise.
      const lister = client(target().backend({ listPageSize: 2 }).backend)
      const under = async (prefix: string) => keysOf(lister.list(`${base}/${prefix}`))
      assert.deepEqual(await under(''), [...keys].sort(byBytes))
      assert.deepEqual(await under('x_'), [`${base}/x_y`], '_ is no wildcard')
      assert.deepEqual(await under('x%'), [`${base}/x%y`], '% is no wildcard')
      assert.deepEqual(await under('E'), [`${base}/E`], 'case matters')
      assert.deepEqual(await under('é'), [`${base}/é`], 'accents matter')
      assert.deepEqual(await under('A'), [`${base}/ABC`])
      assert.deepEqual(await under('a b/'), [`${base}/a b/ü`])
      assert.deepEqual(await under('日'), [`${base}/日本`])
      const all = await keysOf(lister.list(base))
      assert.deepEqual(all, [...keys, ...beside].sort(byBytes))
    } finally {
      await closeAll()
    }
  })
}
