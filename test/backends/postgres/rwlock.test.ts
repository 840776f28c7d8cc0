/**
 * PostgreSQL read-write locks, as the store sees them: the cases every sql-lease store shares
 * (test/backends/sql/rwlock-cases.ts: the two tables beside the lock table and their rows, downgrade in
 * the writer's own row, the server's clock deciding expiry, the rows gone when idle, a crashed holder's
 * too, fences that keep growing after the rows were deleted, a lost COMMIT reply, doctor naming the tables).
 */
import { after, describe } from 'node:test'
import postgres from 'postgres'
import { postgresBackend } from '../../../src/backends/postgres/index.js'
import {
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  qualified,
  rwEntriesTable,
  rwlocksTable,
} from '../../../src/backends/postgres/layout.js'
import { postgresKit } from '../../kits/postgres.js'
import { suiteStore } from '../../kits/suite-store.js'
import { type RwEntryRow, type RwLockRow, rwlockTests } from '../sql/rwlock-cases.js'

const T = { schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }
const RWLOCKS = qualified(rwlocksTable(T))
const ENTRIES = qualified(rwEntriesTable(T))

describe('postgres: read-write locks on the store', { timeout: 240_000 }, () => {
  let sql: postgres.Sql | undefined
  // Registered before the store's own, so it runs first: the connection ends while the server still runs.
  after(async () => {
    await sql?.end({ timeout: 1 })
  })
  const { store, client } = suiteStore(postgresKit, { ttl: '20s' })
  const connection = () => {
    sql ??= postgres(store().url(), { onnotice: () => {}, fetch_types: false })
    return sql
  }
  const admin = <T>(text: string, params: string[] = []) =>
    connection().unsafe(text, params) as unknown as Promise<T[]>

  rwlockTests(() => ({
    client,
    tables: { rwlocks: RWLOCKS, entries: ENTRIES },
    lockRows: (name) =>
      admin<RwLockRow>(
        `SELECT last_fence::text AS last_fence, epoch::text AS epoch FROM ${RWLOCKS} WHERE name = $1`,
        [name],
      ),
    entryRows: (name) =>
      admin<RwEntryRow>(
        `SELECT owner, mode, place::text AS place, fence::text AS fence FROM ${ENTRIES} WHERE name = $1 ORDER BY place`,
        [name],
      ),
    async endLeases(name) {
      await admin(
        `UPDATE ${ENTRIES} SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`,
        [name],
      )
    },
    async truncate() {
      await admin(`TRUNCATE ${RWLOCKS}, ${ENTRIES}`)
    },
    async leaveCrashedHolder(name) {
      await admin(`INSERT INTO ${RWLOCKS} (name, last_fence, epoch) VALUES ($1, 7, 0)`, [name])
      await admin(
        `INSERT INTO ${ENTRIES} (name, owner, mode, place, fence, expires_at)
         VALUES ($1, 'gone', 'write', 7, 7, clock_timestamp() - interval '1 second')`,
        [name],
      )
    },
    get port() {
      return store().ports[0]!
    },
    urlVia: (port) => store().urlVia!([port]),
    // A fresh client's first "commit" travels as text (a Parse message).
    isCommit: (chunk) => chunk.toString('latin1').includes('\0commit\0'),
    // Over the test's own connection: a backend given a client never ends it.
    doctor: (signal) => postgresBackend({ sql: connection() }).doctor!(signal),
  }))
})
