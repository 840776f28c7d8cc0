import { defineConformanceSuite } from '../../conformance/suite.js'
import { zookeeperKit1 } from '../../kits/zookeeper.js'

// The shared suite on a standalone ZooKeeper.
defineConformanceSuite(zookeeperKit1)
