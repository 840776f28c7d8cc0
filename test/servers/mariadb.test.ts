import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createConnection } from 'mysql2/promise'
import { MARIADB_DATABASE, startMariaDb } from './mariadb.js'
import { squat, takenFirst } from './squat.js'

/** Runs one query on the server on `port`, in the tests' database. */
async function query(port: number, sql: string): Promise<unknown[]> {
  const connection = await createConnection({
    host: '127.0.0.1',
    port,
    user: 'root',
    database: MARIADB_DATABASE,
  })
  try {
    const [rows] = await connection.query(sql)
    return rows as unknown[]
  } finally {
    connection.destroy()
  }
}

describe('test servers: mariadbd', { timeout: 120_000 }, () => {
  it('starts on another port when its first one was taken after it was picked', async () => {
    const squatter = await squat()
    const pickPorts = takenFirst(squatter.port)
    try {
      const server = await startMariaDb({ pickPorts })
      try {
        assert.notEqual(server.port, squatter.port)
        assert.equal(pickPorts.picks, 2)
        assert.deepEqual(await query(server.port, 'SELECT 1 AS one'), [{ one: 1 }])
      } finally {
        await server.destroy()
      }
    } finally {
      await squatter.close()
    }
  })

  it('gives up after its attempts with the server log of each', async () => {
    await assert.rejects(startMariaDb({ args: ['--no-such-option=1'] }), (error: Error) => {
      assert.match(error.message, /mariadbd did not start in 3 attempts/)
      assert.equal(error.message.match(/exited \(code \d+\)/g)?.length, 3)
      assert.match(error.message, /server log \(tail\)[\s\S]*no-such-option/)
      return true
    })
  })

  it('restarts on its own port keeping its data', async () => {
    const server = await startMariaDb()
    try {
      await query(server.port, 'CREATE TABLE kept (n INT PRIMARY KEY) ENGINE=InnoDB')
      await query(server.port, 'INSERT INTO kept VALUES (7)')
      await server.restart()
      assert.deepEqual(await query(server.port, 'SELECT n FROM kept'), [{ n: 7 }])
    } finally {
      await server.destroy()
    }
  })
})
