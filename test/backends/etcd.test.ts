import { Etcd3 } from 'etcd3'
import { lockPrefix } from '../../src/backends/etcd/layout.js'
import { createLockClient } from '../../src/index.js'
import { defineConformanceSuite } from '../conformance/suite.js'
import { type EtcdCluster, startEtcd } from '../servers/etcd.js'

// The shared suite on a single etcd and on a 3-member cluster.
for (const size of [1, 3]) {
  let cluster: EtcdCluster
  let admin: Etcd3
  defineConformanceSuite({
    name: size === 1 ? 'etcd' : 'etcd (3 members)',
    url: () => cluster.url(),
    async setup() {
      cluster = await startEtcd(size)
      admin = new Etcd3({ hosts: cluster.members.map((m) => `http://${m.endpoint}`) })
    },
    createClient: (options) => createLockClient(cluster.url(), options),
    // The store forgets the lease, as an early expiry would: every key of the lock goes.
    breakLease: async (key) => {
      await admin.delete().prefix(lockPrefix(key)).exec()
    },
    async teardown() {
      admin.close()
      await cluster.destroy()
    },
  })
}
