import { defineConformanceSuite } from '../conformance/suite.js'
import { postgresKit } from '../kits/postgres.js'

defineConformanceSuite(postgresKit)
