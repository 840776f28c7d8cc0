import { defineConformanceSuite } from '../../conformance/suite.js'
import { mysqlAnsiKit, mysqlKit, mysqlOracleKit } from '../../kits/mysql.js'

// MariaDB with its default sql_mode, and with two others server-wide (the statements must not depend on it).
for (const kit of [mysqlKit, mysqlOracleKit, mysqlAnsiKit]) defineConformanceSuite(kit)
