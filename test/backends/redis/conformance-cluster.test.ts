import { defineConformanceSuite } from '../../conformance/suite.js'
import { redisClusterKit } from '../../kits/redis.js'

defineConformanceSuite(redisClusterKit)
