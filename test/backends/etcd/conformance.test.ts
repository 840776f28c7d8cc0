import { defineConformanceSuite } from '../../conformance/suite.js'
import { etcdKit1, etcdKit3 } from '../../kits/etcd.js'

// The shared suite on a single etcd and on a 3-member cluster.
for (const kit of [etcdKit1, etcdKit3]) defineConformanceSuite(kit)
