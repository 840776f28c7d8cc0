/**
 * PostgreSQL atomic multi-key acquisition, as the store sees it: the cases every sql-lease store shares
 * (test/backends/sql/atomic-cases.ts: a commit whose reply was lost undone by the clean-up).
 */
import { describe } from 'node:test'
import { postgresKit } from '../../kits/postgres.js'
import { suiteStore } from '../../kits/suite-store.js'
import { atomicTests } from '../sql/atomic-cases.js'

describe('postgres: atomic multi-key acquisition on the store', { timeout: 240_000 }, () => {
  const { store, client } = suiteStore(postgresKit, { ttl: '20s' })
  atomicTests(() => ({
    client,
    get port() {
      return store().ports[0]!
    },
    urlVia: (port) => store().urlVia!([port]),
    // A fresh client's first "commit" travels as text (a Parse message).
    isCommit: (chunk) => chunk.toString('latin1').includes('\0commit\0'),
  }))
})
