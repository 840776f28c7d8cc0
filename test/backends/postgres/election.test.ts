/**
 * PostgreSQL elections, as the store sees them: the cases every sql-lease store shares
 * (test/backends/sql/election-cases.ts: the elections table and its rows, a lock and an election of one
 * name apart, a proclaim refused after a takeover, terms past resigns, deletes and retired rows, the DDL
 * when the table may not be made), errors that name the election, and the notifications observers wake on
 * (counted in reads, not timed).
 */
import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import postgres from 'postgres'
import { postgresBackend } from '../../../src/backends/postgres/index.js'
import {
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  electionsTable,
  qualified,
} from '../../../src/backends/postgres/layout.js'
import type { ElectionFacet, LockBackend } from '../../../src/core/backend.js'
import { createLockClient, type LeaderView, type LockClient } from '../../../src/index.js'
import { postgresKit } from '../../kits/postgres.js'
import { suiteStore } from '../../kits/suite-store.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { type ElectionRow, electionTests } from '../sql/election-cases.js'

const LOCKS = qualified({ schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE })
const ELECTIONS = qualified(electionsTable({ schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }))
/** A liveness bound on a loaded machine, not a speed claim. */
const WITHIN_MS = 30_000

/** Settles with `promise`, or rejects after `WITHIN_MS` naming `what`. */
async function within<T>(promise: Promise<T>, what: string): Promise<T> {
  const timer = new AbortController()
  const late = sleep(WITHIN_MS, timer.signal).then(() => {
    throw new Error(`${what}: nothing within ${WITHIN_MS} ms`)
  })
  late.catch(() => {})
  try {
    return await Promise.race([promise, late])
  } finally {
    timer.abort()
  }
}

describe('postgres: elections on the store', { timeout: 240_000 }, () => {
  let sql: postgres.Sql | undefined
  const open: LockClient[] = []
  const backends: LockBackend[] = []
  // Registered before the store's own, so it runs first: all of this ends while the server still runs.
  after(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})))
    await Promise.all(backends.map((b) => b.close().catch(() => {})))
    await sql?.end({ timeout: 1 })
  })
  const { store, client } = suiteStore(postgresKit, { ttl: '20s' })
  const admin = <T>(text: string, params: string[] = []) => {
    sql ??= postgres(store().url(), { onnotice: () => {}, fetch_types: false })
    return sql.unsafe(text, params) as unknown as Promise<T[]>
  }

  electionTests(() => ({
    url: (query) => store().url(query),
    client,
    electionRows: (name) =>
      admin<ElectionRow>(`SELECT owner, fence::text AS fence, value FROM ${ELECTIONS} WHERE name = $1`, [
        name,
      ]),
    lockOwners: async (name) =>
      (await admin<{ owner: string }>(`SELECT owner FROM ${LOCKS} WHERE name = $1`, [name])).map(
        (r) => r.owner,
      ),
    async expire(name, longAgo) {
      await admin(
        `UPDATE ${ELECTIONS} SET expires_at = clock_timestamp() - interval '${longAgo ? '1 hour' : '1 millisecond'}' WHERE name = $1`,
        [name],
      )
    },
    async deleteRow(name) {
      await admin(`DELETE FROM ${ELECTIONS} WHERE name = $1`, [name])
    },
    resignDeletes: true,
    valueColumn: /value/,
  }))

  it('errors speak of the leadership of the election and of the elections table, not of a lock', async () => {
    const locks = client()
    await (await locks.election('words').campaign({ timeout: '20s' })).resign()
    await admin(`DROP TABLE ${ELECTIONS}`)
    try {
      await assert.rejects(locks.election('words').campaign({ timeout: '5s' }), (error: Error) => {
        assert.match(error.message, /^Could not acquire leadership of election "words" on /)
        assert.match(error.message, /The elections table or its fence sequence is missing/)
        return true
      })
    } finally {
      // The next client's first campaign makes the table again (the lock table is untouched).
      await (await client().election('words').campaign({ timeout: '20s' })).resign()
    }
  })

  it('watch wakes at a grant, a proclaim and a release, and not while nothing changes', async () => {
    const backend = postgresBackend({
      sql: postgres(store().url(), { onnotice: () => {}, fetch_types: false }),
    })
    backends.push(backend)
    const facet = backend.election as ElectionFacet
    assert.equal(typeof facet.watch, 'function')
    const watch = () => {
      const stop = new AbortController()
      const woke = awaitLater(facet.watch!('watched', stop.signal).then(() => !stop.signal.aborted))
      return { woke, stop }
    }
    // The first watches make the subscription, which wakes them (whatever happened before could be missed);
    // then a watch stays asleep while nothing changes (a subscription that did not work would poll: wake).
    const quiet = async () => {
      for (let round = 0; round < 5; round++) {
        const w = watch()
        let settled = false
        void w.woke.then(() => {
          settled = true
        })
        await sleep(2000)
        if (!settled) return w
      }
      assert.fail('every watch woke within 2 s although nothing changed')
    }
    const idle = await quiet()
    const lead = await client().election('watched').campaign({ value: 'a', timeout: '20s' })
    assert.ok(await within(idle.woke, 'a grant'))
    const proclaimed = watch()
    await lead.proclaim('b')
    assert.ok(await within(proclaimed.woke, 'a proclaim'))
    const released = watch()
    await lead.resign()
    assert.ok(await within(released.woke, 'a release'))
    // A lock of the same name is not the election's news.
    const apart = watch()
    let woke = false
    void apart.woke.then(() => {
      woke = true
    })
    await (await client().acquire('watched', { timeout: '20s' })).release()
    await sleep(1000)
    assert.equal(woke, false, "a lock's release woke the election's watch")
    apart.stop.abort()
  })

  it('an observer sees a new value at once, without polling (its reads counted)', async () => {
    const inner = postgresBackend({
      sql: postgres(store().url(), { onnotice: () => {}, fetch_types: false }),
    })
    backends.push(inner)
    const facet = inner.election as ElectionFacet
    let reads = 0
    const counted: LockBackend = {
      ...inner,
      election: {
        ...facet,
        inspect: (key, signal) => {
          reads++
          return facet.inspect(key, signal)
        },
      },
    }
    const watcher = createLockClient(counted)
    open.push(watcher)
    const lead = await client().election('observed').campaign({ value: 'a', timeout: '20s' })
    const stop = new AbortController()
    const views = watcher.election('observed').observe({ signal: stop.signal })[Symbol.asyncIterator]()
    const next = async (): Promise<LeaderView> => {
      const got = await within(views.next(), 'the observer')
      assert.ok(!got.done)
      return got.value
    }
    const first = await next()
    assert.ok(first.leader && first.value === 'a')
    // The observer reads only while asked for its next view: ask, and let the subscription's making (one
    // or two reads) pass. Then, idle, a watching observer reads nothing until its 5 s fallback; a polling
    // one would read every second.
    const pending = awaitLater(next())
    await sleep(1500)
    const before = reads
    await sleep(3000)
    assert.ok(reads - before <= 1, `${reads - before} reads in 3 s while nothing changed`)
    await lead.proclaim('b')
    const second = await pending
    assert.ok(second.leader && second.value === 'b')
    stop.abort()
    await views.return?.()
    await lead.resign()
  })
})
