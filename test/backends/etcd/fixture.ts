/**
 * One etcd member for a describe block of the etcd backend's own tests (the conformance suite has its
 * kit): started before the block's tests, with an admin client that reads keys behind the backend's back,
 * and the lock clients the tests make, all closed after them.
 */
import { after, before } from 'node:test'
import * as etcd3 from 'etcd3'
import { etcdBackend } from '../../../src/backends/etcd/index.js'
import type { LockBackend } from '../../../src/core/backend.js'
import { type ClientOptions, createLockClient, type LockClient } from '../../../src/index.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'

/** A key as stored: its value, its lease and its create revision. */
export interface StoredKey {
  readonly key: string
  readonly value: string
  readonly lease: string
  readonly create: bigint
}

export interface EtcdTestCluster {
  /** The cluster, once started. */
  readonly cluster: EtcdCluster
  /** A client of the test's own, to read and change keys. */
  readonly admin: etcd3.Etcd3
  /** A backend over an etcd client of its own. */
  backend(): LockBackend
  /** A lock client over `backend`, closed after the block. */
  client(backend: LockBackend, options: ClientOptions): LockClient
  /** The keys under `prefix`, in key order. */
  keysUnder(prefix: string): Promise<StoredKey[]>
}

/** Starts a one-member cluster for the describe block it is called in. */
export function etcdTestCluster(): EtcdTestCluster {
  let started: { cluster: EtcdCluster; admin: etcd3.Etcd3 } | undefined
  const open: LockClient[] = []
  const ready = () => {
    if (!started)
      throw new Error('etcd: the cluster is not started (call etcdTestCluster inside a describe block)')
    return started
  }
  before(async () => {
    const cluster = await startEtcd(1)
    started = { cluster, admin: new etcd3.Etcd3({ hosts: cluster.endpoints }) }
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    started?.admin.close()
    await started?.cluster.destroy()
  })
  return {
    get cluster() {
      return ready().cluster
    },
    get admin() {
      return ready().admin
    },
    backend: () => etcdBackend({ client: new etcd3.Etcd3({ hosts: ready().cluster.endpoints }) }),
    client(backend, options) {
      const client = createLockClient(backend, options)
      open.push(client)
      return client
    },
    keysUnder: async (prefix) =>
      (await ready().admin.getAll().prefix(prefix).exec()).kvs.map((kv) => ({
        key: kv.key.toString(),
        value: kv.value.toString(),
        lease: kv.lease,
        create: BigInt(kv.create_revision),
      })),
  }
}
