/**
 * One transaction on a pool connection, as the semaphore's and the read-write lock's adapters run theirs:
 * READ COMMITTED, READ WRITE (set for that transaction only: nothing of the session changes), committed
 * when the body resolves, rolled back when it throws. Errors come back as they are: each adapter words them.
 */
import type { Pool, PoolConnection } from 'mysql2/promise'

export type Param = string | number | Buffer | null

/** Runs one statement of the transaction; resolves with what mysql2 gives (rows, or a result header). */
export type Run = (sql: string, params: Param[]) => Promise<unknown>

/**
 * `prepared`: each statement prepared by the server with its params (`execute`), never escaped into the
 * text by the client (whose backslash escapes a session's NO_BACKSLASH_ESCAPES would misread).
 */
export async function inTransaction<T>(
  pool: Pool,
  body: (run: Run) => Promise<T>,
  prepared = false,
): Promise<T> {
  let connection: PoolConnection | undefined
  try {
    connection = await pool.getConnection()
    await connection.query('SET TRANSACTION ISOLATION LEVEL READ COMMITTED')
    await connection.query('START TRANSACTION READ WRITE')
    const c = connection
    const out = await body(async (sql, params) =>
      prepared ? (await c.execute(sql, params))[0] : (await c.query(sql, params))[0],
    )
    await connection.query('COMMIT')
    connection.release()
    return out
  } catch (error) {
    if (connection) {
      // Rolled back and given back; a connection that cannot even roll back is not given back.
      const c = connection
      await c.query('ROLLBACK').then(
        () => c.release(),
        () => c.destroy(),
      )
    }
    throw error
  }
}
