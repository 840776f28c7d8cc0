import { redisClusterKit } from '../kits/redis.js'
import { defineConformanceSuite } from '../conformance/suite.js'

defineConformanceSuite(redisClusterKit)
