import { defineConformanceSuite } from '../conformance/suite.js'
import { mysqlKit } from '../kits/mysql.js'

defineConformanceSuite(mysqlKit)
