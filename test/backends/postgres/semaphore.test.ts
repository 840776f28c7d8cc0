/**
 * PostgreSQL semaphores, as the store sees them: the cases every sql-lease store shares
 * (test/backends/sql/semaphore-cases.ts: the two tables beside the lock table and their rows, a lock and a
 * semaphore of one name apart, the server's clock deciding expiry, the rows gone when idle, a crashed
 * holder's too, sequences that keep growing after the rows were deleted, doctor naming the tables).
 */
import { after, describe } from 'node:test'
import postgres from 'postgres'
import { postgresBackend } from '../../../src/backends/postgres/index.js'
import {
  DEFAULT_SCHEMA,
  DEFAULT_TABLE,
  permitsTable,
  qualified,
  semaphoresTable,
} from '../../../src/backends/postgres/layout.js'
import { postgresKit } from '../../kits/postgres.js'
import { suiteStore } from '../../kits/suite-store.js'
import { type PermitRow, type SemaphoreRow, semaphoreTests } from '../sql/semaphore-cases.js'

const T = { schema: DEFAULT_SCHEMA, table: DEFAULT_TABLE }
const SEMAPHORES = qualified(semaphoresTable(T))
const PERMITS = qualified(permitsTable(T))

describe('postgres: semaphores on the store', { timeout: 240_000 }, () => {
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

  semaphoreTests(() => ({
    client,
    tables: { semaphores: SEMAPHORES, permits: PERMITS },
    semaphoreRows: (name) =>
      admin<SemaphoreRow>(
        `SELECT permit_limit, last_sequence::text AS last_sequence FROM ${SEMAPHORES} WHERE name = $1`,
        [name],
      ),
    permitRows: (name) =>
      admin<PermitRow>(
        `SELECT owner, permits, granted, sequence::text AS sequence FROM ${PERMITS} WHERE name = $1 ORDER BY sequence`,
        [name],
      ),
    async endLeases(name) {
      await admin(
        `UPDATE ${PERMITS} SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`,
        [name],
      )
    },
    async truncate() {
      await admin(`TRUNCATE ${SEMAPHORES}, ${PERMITS}`)
    },
    async leaveCrashedHolder(name) {
      await admin(`INSERT INTO ${SEMAPHORES} (name, permit_limit, last_sequence) VALUES ($1, 1, 7)`, [name])
      await admin(
        `INSERT INTO ${PERMITS} (name, owner, permits, granted, sequence, expires_at)
         VALUES ($1, 'gone', 1, true, 7, clock_timestamp() - interval '1 second')`,
        [name],
      )
    },
    // Over the test's own connection: a backend given a client never ends it.
    get port() {
      return store().ports[0]!
    },
    urlVia: (port) => store().urlVia!([port]),
    // A fresh client's first "commit" travels as text (a Parse message).
    isCommit: (chunk) => chunk.toString('latin1').includes('\0commit\0'),
    doctor: (signal) => postgresBackend({ sql: connection() }).doctor!(signal),
  }))
})
