/**
 * The PostgreSQL dialect's contract with the engine that needs no server: an acquire settles only when its
 * statement has, even when its signal aborts first, so that the clean-up of an acquire given up meanwhile
 * reaches the server after the statement it must undo (chaos S15 found a lease left behind otherwise).
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { PostgresDialect } from '../../src/backends/postgres/dialect.js'
import type { PgSql } from '../../src/backends/postgres/sql.js'
import { awaitLater } from '../support/later.js'

it('an acquire whose signal aborts settles only when its statement does', async () => {
  let answer!: (rows: unknown[]) => void
  const statement = new Promise<unknown[]>((resolve) => {
    answer = resolve
  })
  const sql = Object.assign(() => {}, {
    unsafe: () => statement,
    listen: async () => ({ unlisten: async () => {} }),
    end: async () => {},
    options: { prepare: true },
  }) as unknown as PgSql
  const dialect = new PostgresDialect({
    sql,
    table: { schema: 'public', table: 't' },
    id: 'pg',
    owned: false,
  })
  const abort = new AbortController()
  let settled = false
  const acquired = awaitLater(
    dialect.acquire({ key: 'k', owner: 'o', ttlMs: 1000 }, abort.signal).finally(() => {
      settled = true
    }),
  )
  abort.abort(new Error('given up'))
  await new Promise((resolve) => setTimeout(resolve, 50))
  assert.equal(settled, false, 'the attempt settled while its statement could still grant')
  answer([{ granted: true, fence: '3', ms: 1000, owner: null, released: false, holder: null }])
  assert.deepEqual(await acquired, { granted: true, fence: 3n, leaseMs: 1000 })
})
