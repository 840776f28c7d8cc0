import { Redis } from 'ioredis'
import { createLockClient } from '../../src/index.js'
import { defineConformanceSuite } from '../conformance/suite.js'
import { type RedisNodes, startRedisNodes } from '../servers/redis.js'

// The shared suite on 5 and on 3 independent masters. The servers are seconds old, so the delayed-restart
// rule (a node counts once it has been up for the largest ttl in use) is turned off here with
// restartDelay=0; redlock-faults.test.ts tests that rule with its default.
for (const count of [5, 3]) {
  let nodes: RedisNodes
  let admins: Redis[] = []
  const url = () => nodes.url('?restartDelay=0')
  defineConformanceSuite({
    name: `redlock (${count} nodes)`,
    url,
    async setup() {
      nodes = await startRedisNodes(count)
      admins = nodes.servers.map((s) => new Redis(s.port, '127.0.0.1'))
    },
    createClient: (options) => createLockClient(url(), options),
    // Every node forgets the lease, as an early expiry would; the fence counters stay.
    breakLease: async (key) => {
      await Promise.all(admins.map((a) => a.del(`fencelock:{${key}}`)))
    },
    async teardown() {
      for (const a of admins) a.disconnect()
      await nodes.destroy()
    },
  })
}
