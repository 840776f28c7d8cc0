import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import postgres from 'postgres'
import { startPostgres } from './postgres.js'
import { squat, takenFirst } from './squat.js'

/** Runs `text` once on `url`'s server. */
async function query<T>(url: string, text: string): Promise<T[]> {
  const sql = postgres(url, { max: 1, onnotice: () => {} })
  try {
    return (await sql.unsafe(text)) as unknown as T[]
  } finally {
    await sql.end({ timeout: 1 })
  }
}

describe('test servers: postgres', { timeout: 120_000 }, () => {
  it('starts on another port when its first one was taken, and keeps its data across a restart', async () => {
    const squatter = await squat()
    const pickPorts = takenFirst(squatter.port)
    try {
      const server = await startPostgres({ pickPorts })
      try {
        assert.notEqual(server.port, squatter.port)
        assert.equal(pickPorts.picks, 2)
        await query(server.url(), 'CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)')
        await server.restart()
        const rows = await query<{ n: number }>(server.url(), 'SELECT n FROM kept')
        assert.deepEqual(
          rows.map((r) => r.n),
          [7],
        )
        server.signal('SIGKILL')
        await server.restart()
        assert.equal((await query<{ n: number }>(server.url(), 'SELECT n FROM kept')).length, 1)
      } finally {
        await server.destroy()
      }
    } finally {
      await squatter.close()
    }
  })
})
