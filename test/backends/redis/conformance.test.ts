import { defineConformanceSuite } from '../../conformance/suite.js'
import { redisAofKit, redisFairKit, redisKit } from '../../kits/redis.js'

// One Redis primary: plain, fair (a queue of waiters), and with every write persisted (durable fences).
for (const kit of [redisKit, redisFairKit, redisAofKit]) defineConformanceSuite(kit)
