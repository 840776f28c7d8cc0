import { defineConformanceSuite } from '../../conformance/suite.js'
import { redlock3Kit, redlock5Kit } from '../../kits/redlock.js'

// The shared suite on 5 and on 3 independent masters.
for (const kit of [redlock5Kit, redlock3Kit]) defineConformanceSuite(kit)
