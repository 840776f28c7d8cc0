import { defineConformanceSuite } from '../../conformance/suite.js'
import { zookeeperKit3 } from '../../kits/zookeeper.js'

// The shared suite on a 3-member ZooKeeper ensemble.
defineConformanceSuite(zookeeperKit3)
