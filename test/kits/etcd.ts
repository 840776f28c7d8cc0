/**
 * The etcd backend's kits: a single member and a cluster of three. The holder of a lock is the first key
 * under the backend's own `lockPrefix(key)` by create revision: a lease is broken by deleting that key, a
 * session lost by revoking the lease the key is attached to.
 */
import { Etcd3 } from 'etcd3'
import { lockPrefix } from '../../src/backends/etcd/layout.js'
import { type EtcdCluster, startEtcd } from '../servers/etcd.js'
import { type Kit, type KitStore, loopback } from './kit.js'
import { memberFaults } from './members.js'

/** Runs `use` with a fresh admin client (a crash or a restart may have broken an older one's connections). */
async function withAdmin<T>(cluster: EtcdCluster, use: (admin: Etcd3) => Promise<T>): Promise<T> {
  const admin = new Etcd3({ hosts: cluster.members.map((m) => `http://${m.endpoint}`) })
  try {
    return await use(admin)
  } finally {
    admin.close()
  }
}

/** The holder's key of the lock named `key` (the first by create revision), with its lease id. */
async function holderKey(admin: Etcd3, key: string): Promise<{ key: string; lease: string } | undefined> {
  const { kvs } = await admin.getAll().prefix(lockPrefix(key)).sort('Create', 'Ascend').limit(1).exec()
  const first = kvs[0]
  return first ? { key: first.key.toString(), lease: first.lease } : undefined
}

function etcdStore(cluster: EtcdCluster): KitStore {
  const { members } = cluster
  return {
    url: (query = '') => cluster.url(query),
    ports: members.map((m) => m.clientPort),
    urlVia: (ports, query = '') => `etcd://${loopback(ports)}${query}`,
    breakLease: (key) =>
      withAdmin(cluster, async (admin) => {
        const holder = await holderKey(admin, key)
        if (holder) await admin.delete().key(holder.key).exec()
      }),
    loseSession: (key) =>
      withAdmin(cluster, async (admin) => {
        const holder = await holderKey(admin, key)
        if (!holder) throw new Error(`no holder of ${key} to take the session of`)
        // Revoking the lease deletes every key on it: what etcd does when a session's lease expires.
        await admin.leaseClient.leaseRevoke({ ID: holder.lease })
      }),
    ...memberFaults(members, () => cluster.leader()),
    logs: () => Object.fromEntries(members.map((m) => [`etcd-${m.name}`, m.log()])),
    recoveryMs: 5000,
    close: () => cluster.destroy(),
  }
}

function etcdKit(size: number): Kit {
  return {
    id: size === 1 ? 'etcd' : `etcd-${size}`,
    backend: 'etcd',
    title: size === 1 ? 'etcd' : `etcd (${size} members)`,
    entry: 'etcd',
    networked: true,
    capabilities: {
      fifo: true,
      session: true,
      notify: true,
      // etcd leases are whole seconds, and this server's shortest is 1.5 election timeouts (750 ms) rounded up.
      minTtlMs: 1000,
      durableFences: true,
      processes: true,
      longerExtend: true,
    },
    lacks: {},
    start: async () => etcdStore(await startEtcd(size)),
  }
}

export const etcdKit1: Kit = {
  ...etcdKit(1),
  chaos: [{ name: 'etcd', features: ['crash', 'durable', 'expire'] }],
  bench: [{ name: 'fencelock etcd', store: 'etcd' }],
}

export const etcdKit3: Kit = {
  ...etcdKit(3),
  chaos: [{ name: 'etcd-3', features: ['leader', 'durable'] }],
}
