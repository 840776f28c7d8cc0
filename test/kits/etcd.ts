/**
 * The etcd backend's kits: a single member and a cluster of three. The holder of a lock is the first key
 * under the backend's own `lockPrefix(key)` by create revision: a lease is broken by deleting that key, a
 * session lost by revoking the lease the key is attached to, and an operator's clean-up deletes the
 * lock's keys (or the whole prefix). The cluster's members reach each other through proxies, so that one
 * can be cut off from the others with the clients' links up (`isolateMember`).
 */
import { Etcd3 } from 'etcd3'
import { DEFAULT_PREFIX, lockPrefix } from '../../src/backends/etcd/layout.js'
import { type EtcdCluster, type EtcdOptions, startEtcd } from '../servers/etcd.js'
import { waitUntil } from '../support/wait.js'
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
    deleteState: (key) =>
      withAdmin(cluster, async (admin) => {
        await admin
          .delete()
          .prefix(key === undefined ? DEFAULT_PREFIX : lockPrefix(key))
          .exec()
      }),
    ...memberFaults(members, () => cluster.leader()),
    ...(members.length > 1
      ? {
          leaderIndex: async () => members.indexOf(await cluster.leader()),
          async isolateMember(node: number) {
            const heal = cluster.isolate(node)
            return async () => {
              heal()
              // Back once it answers /health again (which needs it to know a leader).
              const member = members[node]!
              await waitUntil(() => member.healthy(), `etcd ${member.name} to rejoin after the partition`, {
                withinMs: 30_000,
                everyMs: 100,
              })
            }
          },
        }
      : {}),
    logs: () => Object.fromEntries(members.map((m) => [`etcd-${m.name}`, m.log()])),
    recoveryMs: 5000,
    close: () => cluster.destroy(),
  }
}

/** A running etcd of `size` members as a kit's store (a cluster's peers linked through proxies). */
export async function startEtcdStore(size: number, options: EtcdOptions = {}): Promise<KitStore> {
  return etcdStore(await startEtcd(size, { peerLinks: size > 1, ...options }))
}

function etcdKit(size: number): Kit {
  return {
    id: size === 1 ? 'etcd' : `etcd-${size}`,
    backend: 'etcd',
    title: size === 1 ? 'etcd' : `etcd (${size} members)`,
    entry: 'etcd/conformance',
    primitives: [
      'mutex',
      'slots',
      'election',
      'semaphore',
      'multikey',
      'multikey-atomic',
      'resume',
      'rwlock',
    ],
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
    start: () => startEtcdStore(size),
  }
}

export const etcdKit1: Kit = {
  ...etcdKit(1),
  chaos: [{ name: 'etcd', features: ['crash', 'durable', 'expire', 'delete-state'] }],
  bench: [{ name: 'fencelock etcd', store: 'etcd' }],
}

export const etcdKit3: Kit = {
  ...etcdKit(3),
  chaos: [{ name: 'etcd-3', features: ['leader', 'durable', 'members', 'delete-state'] }],
}
