import { defineConformanceSuite } from '../../conformance/suite.js'
import { s3Kit } from '../../kits/s3.js'

defineConformanceSuite(s3Kit)
