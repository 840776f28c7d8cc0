/**
 * MySQL/MariaDB atomic multi-key acquisition, as the store sees it, on a real MariaDB 10.11: the cases
 * every sql-lease store shares (test/backends/sql/atomic-cases.ts: a commit whose reply was lost undone
 * by the clean-up).
 */
import { describe } from 'node:test'
import { mysqlKit } from '../../kits/mysql.js'
import { suiteStore } from '../../kits/suite-store.js'
import { atomicTests } from '../sql/atomic-cases.js'

describe('mysql: atomic multi-key acquisition on the store', { timeout: 240_000 }, () => {
  const { store, client } = suiteStore(mysqlKit, { ttl: '20s' })
  atomicTests(() => ({
    client,
    get port() {
      return store().ports[0]!
    },
    urlVia: (port) => store().urlVia!([port]),
    // A COM_QUERY packet (0x03) whose text is COMMIT.
    isCommit: (chunk) => chunk[4] === 0x03 && chunk.toString('latin1', 5) === 'COMMIT',
  }))
})
