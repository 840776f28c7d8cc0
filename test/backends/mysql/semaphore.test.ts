/**
 * MySQL/MariaDB semaphores, as the store sees them, on a real MariaDB 10.11: the cases every sql-lease
 * store shares (test/backends/sql/semaphore-cases.ts: the two tables beside the lock table and their rows,
 * a lock and a semaphore of one name apart, the server's clock deciding expiry, the rows gone when idle, a
 * crashed holder's too, sequences that keep growing after the rows were deleted, doctor naming the tables).
 */
import { describe } from 'node:test'
import { fromUrl } from '../../../src/backends/mysql/index.js'
import { DEFAULT_TABLE, semaphoreTableNames } from '../../../src/backends/mysql/layout.js'
import { mariaDbQuery, mysqlKit } from '../../kits/mysql.js'
import { suiteStore } from '../../kits/suite-store.js'
import { type PermitRow, type SemaphoreRow, semaphoreTests } from '../sql/semaphore-cases.js'

const SEMAPHORES = semaphoreTableNames(DEFAULT_TABLE).semaphores.quoted
const PERMITS = semaphoreTableNames(DEFAULT_TABLE).permits.quoted
/** The server's clock in µs, as the permits table keeps lease ends. */
const NOW_US = 'CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)'

describe('mysql: semaphores on the store', { timeout: 240_000 }, () => {
  const { store, client } = suiteStore(mysqlKit, { ttl: '20s' })
  const admin = async <T>(text: string, params: string[] = []) =>
    (await mariaDbQuery(Number(new URL(store().url()).port), text, params)) as T[]

  semaphoreTests(() => ({
    client,
    tables: { semaphores: SEMAPHORES, permits: PERMITS },
    semaphoreRows: (name) =>
      admin<SemaphoreRow>(
        `SELECT permit_limit, CAST(last_sequence AS CHAR) AS last_sequence FROM ${SEMAPHORES} WHERE sem_key = ?`,
        [name],
      ),
    permitRows: async (name) =>
      (
        await admin<Omit<PermitRow, 'granted'> & { granted: number }>(
          `SELECT owner, permits, granted, CAST(sequence AS CHAR) AS sequence FROM ${PERMITS} WHERE sem_key = ? ORDER BY sequence`,
          [name],
        )
      ).map((row) => ({ ...row, granted: row.granted === 1 })),
    async endLeases(name) {
      await admin(`UPDATE ${PERMITS} SET expires_at = ${NOW_US} - 1000000 WHERE sem_key = ?`, [name])
    },
    async truncate() {
      await admin(`TRUNCATE TABLE ${SEMAPHORES}`)
      await admin(`TRUNCATE TABLE ${PERMITS}`)
    },
    async leaveCrashedHolder(name) {
      await admin(`INSERT INTO ${SEMAPHORES} (sem_key, permit_limit, last_sequence) VALUES (?, 1, 7)`, [name])
      await admin(
        `INSERT INTO ${PERMITS} (sem_key, owner, permits, granted, sequence, expires_at)
         VALUES (?, 'gone', 1, 1, 7, ${NOW_US} - 1000000)`,
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
