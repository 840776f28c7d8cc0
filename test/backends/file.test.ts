import { fileKit } from '../kits/file.js'
import { defineConformanceSuite } from '../conformance/suite.js'

defineConformanceSuite(fileKit)
