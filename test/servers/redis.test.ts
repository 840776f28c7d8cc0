import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { startRedis } from './redis.js'
import { squat, takenFirst } from './squat.js'

/** Whether a server answers PING on `port`. */
async function answersPing(port: number): Promise<boolean> {
  const client = new Redis(port, '127.0.0.1')
  try {
    return (await client.ping()) === 'PONG'
  } finally {
    client.disconnect()
  }
}

describe('test servers: redis-server', { timeout: 120_000 }, () => {
  it('starts on another port when its first one was taken after it was picked', async () => {
    const squatter = await squat()
    const pickPorts = takenFirst(squatter.port)
    try {
      const server = await startRedis({ pickPorts })
      try {
        assert.notEqual(server.port, squatter.port)
        assert.equal(pickPorts.picks, 2)
        assert.ok(await answersPing(server.port))
      } finally {
        await server.destroy()
      }
    } finally {
      await squatter.close()
    }
  })

  it('gives up after its attempts with the server log of each', async () => {
    await assert.rejects(startRedis({ args: ['--no-such-directive', 'yes'] }), (error: Error) => {
      assert.match(error.message, /redis-server did not start in 3 attempts/)
      assert.equal(error.message.match(/exited \(code 1\)/g)?.length, 3)
      assert.match(error.message, /server log \(tail\)[\s\S]*no-such-directive/)
      return true
    })
  })

  it('restarts on its own port, and says so with the log when that port is taken', async () => {
    const server = await startRedis()
    try {
      await server.stop()
      const squatter = await squat(server.port)
      try {
        await assert.rejects(server.restart(), (error: Error) => {
          assert.match(
            error.message,
            new RegExp(`redis-server on port ${server.port} could not start again on its old port`),
          )
          assert.match(error.message, /server log \(tail\)[\s\S]*(Address already in use|bind)/i)
          return true
        })
      } finally {
        await squatter.close()
      }
      await server.restart()
      assert.ok(await answersPing(server.port))
    } finally {
      await server.destroy()
    }
  })
})
