import assert from 'node:assert/strict'
import { after, before, it } from 'node:test'
import { Redis } from 'ioredis'
import { monitorRedis } from '../../bench/redis-monitor.js'
import { type RedisServer, startRedis } from '../servers/redis.js'

let server: RedisServer
before(async () => {
  server = await startRedis()
})
after(() => server?.stop())

// The bench counts requests with MONITOR while other clients talk. A monitor started in the middle of
// traffic must neither fail nor miss a request sent after it started (ioredis's monitor() threw an unhandled
// "Command queue state error" when a request line came in the same read as MONITOR's reply).
it(
  'starts while other clients talk, and counts each request sent after it started',
  { timeout: 60_000 },
  async () => {
    const noisy = new Redis(server.port, '127.0.0.1')
    let talking = true
    const noise = (async () => {
      while (talking) await Promise.all(Array.from({ length: 20 }, () => noisy.ping()))
    })()
    const client = new Redis(server.port, '127.0.0.1')
    try {
      await client.ping()
      for (let round = 0; round < 30; round++) {
        let echoes = 0
        let lua = 0
        const monitor = await monitorRedis(server.port, (command, source) => {
          if (command === 'echo') echoes++
          if (source === 'lua' && command === 'get') lua++
        })
        try {
          await client.echo('counted')
          await client.eval("return redis.call('get', KEYS[1])", 1, 'k')
          // MONITOR sends a line before the reply of the command it shows: a PING through the monitor's
          // own order is not possible, so wait for the lines already sent by the server to arrive.
          await waitFor(() => echoes === 1 && lua === 1)
        } finally {
          monitor.close()
        }
        assert.equal(echoes, 1)
        assert.equal(lua, 1)
      }
    } finally {
      talking = false
      await noise
      noisy.disconnect()
      client.disconnect()
    }
  },
)

async function waitFor(done: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !done(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
}
