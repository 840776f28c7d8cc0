import { defineConformanceSuite } from '../../conformance/suite.js'
import { gcsKit } from '../../kits/gcs.js'

defineConformanceSuite(gcsKit)
