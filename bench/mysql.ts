/**
 * The bench's MySQL/MariaDB pieces: a hand-written floor (the least work one lease-row lock needs per
 * cycle: one INSERT … ON DUPLICATE KEY UPDATE that takes the row when free, one UPDATE that frees it; no
 * fence, no engine, never waits) and a counter of the statements the server runs (scenario h). Both reach
 * the server of the kit's store through the URL the bench gave fencelock's adapter.
 */
import { randomBytes } from 'node:crypto'
import { createConnection, createPool } from 'mysql2/promise'
import type { Adapter, Env } from './adapter.js'

const TTL_MS = 30_000
const FLOOR_TABLE = 'fencelock_bench_floor'

/** The server of the kit's store, from the URL of fencelock's adapter on it. */
export function serverOf(env: Env): { host: string; port: number; user: string; database: string } {
  const url = env.urls['fencelock mysql']
  if (url === undefined) throw new Error('no mysql store was started')
  const parsed = new URL(url)
  return {
    host: parsed.hostname,
    port: Number(parsed.port),
    user: decodeURIComponent(parsed.username),
    database: parsed.pathname.slice(1),
  }
}

export const mysqlFloor: Adapter = {
  name: 'raw floor: mysql INSERT … ON DUPLICATE KEY UPDATE',
  store: 'mysql',
  kind: 'floor',
  fences: false,
  waits: false,
  note: 'one INSERT … ON DUPLICATE KEY UPDATE taking the row when its lease ended (SYSDATE(6)), one owner-checked UPDATE freeing it, both prepared (mysql2 execute); a mysql2 pool with FOUND_ROWS off; no fence',
  async createLocker(env) {
    const pool = createPool({ ...serverOf(env), flags: ['-FOUND_ROWS'], connectionLimit: 4 })
    await pool.query(`CREATE TABLE IF NOT EXISTS ${FLOOR_TABLE} (
      k VARBINARY(255) PRIMARY KEY, owner CHAR(32) NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB`)
    return {
      async acquire(key) {
        const owner = randomBytes(16).toString('hex')
        const [result] = await pool.execute(
          `INSERT INTO ${FLOOR_TABLE} (k, owner, expires_at) VALUES (?, ?, SYSDATE(6) + INTERVAL ? MICROSECOND)
          ON DUPLICATE KEY UPDATE
            owner = IF(expires_at <= SYSDATE(6), VALUES(owner), owner),
            expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)`,
          [key, owner, TTL_MS * 1000],
        )
        if ((result as { affectedRows: number }).affectedRows === 0) throw new Error(`${key} is held`)
        return {
          release: async () => {
            await pool.execute(
              `UPDATE ${FLOOR_TABLE} SET expires_at = '1970-01-02' WHERE k = ? AND owner = ?`,
              [key, owner],
            )
          },
        }
      },
      close: () => pool.end(),
    }
  },
}

/** Statements the server ran (its `Questions` counter, less the reads of it), from `reset()` on. */
export async function mysqlStatementsCounter(env: Env) {
  const connection = await createConnection(serverOf(env))
  const read = async () => {
    const [rows] = await connection.query("SHOW GLOBAL STATUS LIKE 'Questions'")
    return Number((rows as { Value: string }[])[0]?.Value)
  }
  let from = await read()
  return {
    reset: async () => {
      from = await read()
    },
    count: async () => (await read()) - from - 1,
    close: () => connection.destroy(),
  }
}
