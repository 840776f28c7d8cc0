import { defineConformanceSuite } from '../../conformance/suite.js'
import { fileKit } from '../../kits/file.js'

defineConformanceSuite(fileKit)
