import { Cluster } from 'ioredis'
import { redisLockKeys } from '../../src/backends/redis/layout.js'
import { createLockClient } from '../../src/index.js'
import { defineConformanceSuite } from '../conformance/suite.js'
import { type RedisCluster, startRedisCluster } from '../servers/redis.js'

let cluster: RedisCluster
let admin: Cluster

defineConformanceSuite({
  name: 'redis (cluster of 3 masters)',
  url: () => cluster.url,
  async setup() {
    cluster = await startRedisCluster(3)
    admin = new Cluster([{ host: '127.0.0.1', port: cluster.nodes[0]!.port }])
  },
  createClient: (options) => createLockClient(cluster.url, options),
  breakLease: async (key) => {
    await admin.del(redisLockKeys(key).lock)
  },
  async teardown() {
    admin.disconnect()
    await cluster.destroy()
  },
})
