import { defineConformanceSuite } from '../../conformance/suite.js'
import { postgresKit, postgresRepeatableReadKit, postgresSerializableKit } from '../../kits/postgres.js'

for (const kit of [postgresKit, postgresSerializableKit, postgresRepeatableReadKit])
  defineConformanceSuite(kit)
