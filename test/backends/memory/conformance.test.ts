import { defineConformanceSuite } from '../../conformance/suite.js'
import { memoryKit } from '../../kits/memory.js'

defineConformanceSuite(memoryKit)
