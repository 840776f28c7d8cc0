/**
 * MySQL/MariaDB read-write locks, as the store sees them, on a real MariaDB: the cases every sql-lease
 * store shares (test/backends/sql/rwlock-cases.ts: the two tables beside the lock table and their rows,
 * downgrade in the writer's own row, the server's clock deciding expiry, the rows gone when idle, a crashed
 * holder's too, fences that keep growing after the rows were deleted, a lost COMMIT reply, doctor).
 */
import { describe } from 'node:test'
import { fromUrl } from '../../../src/backends/mysql/index.js'
import { DEFAULT_TABLE, rwlockTableNames } from '../../../src/backends/mysql/layout.js'
import { mariaDbQuery, mysqlKit } from '../../kits/mysql.js'
import { suiteStore } from '../../kits/suite-store.js'
import { type RwEntryRow, type RwLockRow, rwlockTests } from '../sql/rwlock-cases.js'

const RWLOCKS = rwlockTableNames(DEFAULT_TABLE).rwlocks.quoted
const ENTRIES = rwlockTableNames(DEFAULT_TABLE).entries.quoted
/** The server's clock in µs, as the entries table keeps lease ends. */
const NOW_US = 'CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)'

describe('mysql: read-write locks on the store', { timeout: 240_000 }, () => {
  const { store, client } = suiteStore(mysqlKit, { ttl: '20s' })
  const admin = async <T>(text: string, params: string[] = []) =>
    (await mariaDbQuery(Number(new URL(store().url()).port), text, params)) as T[]

  rwlockTests(() => ({
    client,
    tables: { rwlocks: RWLOCKS, entries: ENTRIES },
    lockRows: (name) =>
      admin<RwLockRow>(
        `SELECT CAST(last_fence AS CHAR) AS last_fence, CAST(epoch AS CHAR) AS epoch FROM ${RWLOCKS} WHERE rw_key = ?`,
        [name],
      ),
    entryRows: (name) =>
      admin<RwEntryRow>(
        `SELECT owner, mode, CAST(place AS CHAR) AS place, CAST(fence AS CHAR) AS fence
         FROM ${ENTRIES} WHERE rw_key = ? ORDER BY place`,
        [name],
      ),
    async endLeases(name) {
      await admin(`UPDATE ${ENTRIES} SET expires_at = ${NOW_US} - 1000000 WHERE rw_key = ?`, [name])
    },
    async truncate() {
      await admin(`TRUNCATE TABLE ${RWLOCKS}`)
      await admin(`TRUNCATE TABLE ${ENTRIES}`)
    },
    async leaveCrashedHolder(name) {
      await admin(`INSERT INTO ${RWLOCKS} (rw_key, last_fence, epoch) VALUES (?, 7, 0)`, [name])
      await admin(
        `INSERT INTO ${ENTRIES} (rw_key, owner, mode, place, fence, expires_at)
         VALUES (?, 'gone', 'write', 7, 7, ${NOW_US} - 1000000)`,
        [name],
      )
    },
    get port() {
      return store().ports[0]!
    },
    urlVia: (port) => store().urlVia!([port]),
    // A COM_QUERY packet (0x03) whose text is COMMIT.
    isCommit: (chunk) => chunk[4] === 0x03 && chunk.toString('latin1', 5) === 'COMMIT',
    async doctor(signal) {
      const backend = await fromUrl(new URL(store().url()))
      try {
        return await backend.doctor!(signal)
      } finally {
        await backend.close()
      }
    },
  }))
})
