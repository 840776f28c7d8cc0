import { memoryKit } from '../kits/memory.js'
import { defineConformanceSuite } from '../conformance/suite.js'

defineConformanceSuite(memoryKit)
