import { Redis } from 'ioredis'
import { redisLockKeys } from '../../src/backends/redis/layout.js'
import { createLockClient } from '../../src/index.js'
import { defineConformanceSuite } from '../conformance/suite.js'
import { type RedisServer, startRedis } from '../servers/redis.js'

let server: RedisServer
let admin: Redis

for (const mode of ['', '?fair=true']) {
  defineConformanceSuite({
    name: mode ? 'redis (fair)' : 'redis',
    url: () => `${server.url}${mode}`,
    async setup() {
      server = await startRedis()
      admin = new Redis(server.port, '127.0.0.1')
    },
    createClient: (options) => createLockClient(`${server.url}${mode}`, options),
    // The store forgets the lease, as an early expiry would; the fence counter stays.
    breakLease: async (key) => {
      await admin.del(redisLockKeys(key).lock)
    },
    async teardown() {
      admin.disconnect()
      await server.destroy()
    },
  })
}
