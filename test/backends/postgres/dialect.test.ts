/**
 * The PostgreSQL dialect's contract with the engine that needs no server: an acquire settles only when its
 * statement has, even when its signal aborts first, so that the clean-up of an acquire given up meanwhile
 * reaches the server after the statement it must undo (chaos S15 found a lease left behind otherwise); and
 * the literals spliced into its statements carry no character a session setting could read otherwise.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { PostgresAdapter } from '../../../src/backends/postgres/adapter.js'
import type { PgSql } from '../../../src/backends/postgres/client.js'
import {
  bigintLiteral,
  floatLiteral,
  regclassLiteral,
  textLiteral,
} from '../../../src/backends/postgres/literals.js'
import { awaitLater } from '../../support/later.js'

it('an acquire whose signal aborts settles only when its statement does', async () => {
  let answer!: (rows: unknown[]) => void
  const statement = new Promise<unknown[]>((resolve) => {
    answer = resolve
  })
  // One message: the isolation pin's (empty) result, then the statement's rows, each with its command tag
  // as postgres.js sets it (the adapter takes rows only from a statement that ran).
  const message = statement.then((rows) => [
    Object.assign([], { command: 'SET' }),
    Object.assign(rows, { command: 'SELECT' }),
  ])
  const sql = Object.assign(() => {}, {
    unsafe: () => Object.assign(message, { simple: () => message }),
    listen: async () => ({ unlisten: async () => {} }),
    end: async () => {},
    options: { prepare: true },
  }) as unknown as PgSql
  const dialect = new PostgresAdapter({
    sql,
    table: { schema: 'public', table: 't' },
    id: 'pg',
    owned: false,
    createTable: true,
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

it('literals: text as hex digits only, numbers checked, relation names escaped for E strings', () => {
  const nasty = "it's a \\ key; DROP TABLE x; -- \u00e9\u{1f512}"
  const text = textLiteral(nasty)
  const hex = /decode\('([0-9a-f]*)', 'hex'\)/.exec(text)?.[1]
  assert.equal(Buffer.from(hex!, 'hex').toString('utf8'), nasty)
  assert.equal(text.replace(hex!, ''), textLiteral(''), 'nothing of the value outside the hex digits')
  assert.equal(floatLiteral(1500.25), "'1500.25'::pg_catalog.float8")
  assert.throws(() => floatLiteral(Number.NaN), /finite/)
  assert.equal(bigintLiteral(2n ** 62n), `'${2n ** 62n}'::pg_catalog.int8`)
  assert.equal(regclassLiteral('"s\\"."t\'"'), `E'"s\\\\"."t''"'::pg_catalog.regclass`)
})
