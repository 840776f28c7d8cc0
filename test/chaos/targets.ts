/**
 * The stores a chaos run can target, each started by the same test servers as the other tests (real
 * servers, loopback ports, their own temp folders). Workers reach a networked store through their own
 * TCP proxies, so a fault can cut, slow or drop one client's traffic; the file backend has no network.
 */
import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { Etcd3 } from 'etcd3'
import { Redis } from 'ioredis'
import { lockPrefix } from '../../src/backends/etcd/layout.js'
import { keyFolderName } from '../../src/backends/file/generations.js'
import { redisLockKeys } from '../../src/backends/redis/layout.js'
import { type EtcdCluster, startEtcd } from '../servers/etcd.js'
import { type RedisServer, startRedis, startRedisNodes } from '../servers/redis.js'

export interface Store {
  /** The server ports a worker's proxies forward to (one proxy per port, per worker). */
  readonly ports: readonly number[]
  /** The URL a worker uses, given its proxies' ports (same order as `ports`). */
  urlVia(proxyPorts: readonly number[]): string
  /** The tail of each server's log, by name (kept beside a run's history). */
  logs(): Record<string, string>
  /** How long after a healed fault the store may take to serve again (on top of one ttl). */
  readonly recoveryMs: number
  /** Crash (SIGKILL) and restart the server, or one Redlock node (`node`), with whatever it persisted. */
  crash?(node?: number): Promise<void>
  /** Kill the etcd leader of a cluster and bring it back. */
  killLeader?(): Promise<void>
  /** Remove the holder's lease behind its back (a server-side clock jump: premature expiry). */
  expireEarly?(key: string): Promise<void>
  close(): Promise<void>
}

export interface Target {
  readonly name: string
  /** Networked: faults on the client's traffic apply. */
  readonly networked: boolean
  /** Says which scenarios' server faults apply. */
  readonly features: ReadonlySet<'crash' | 'durable' | 'leader' | 'redlock' | 'expire'>
  start(dir: string): Promise<Store>
}

/** Deletes a lock's key on one Redis server behind its holder's back (the backend's default prefix). */
async function deleteLockKey(port: number, key: string): Promise<void> {
  const admin = new Redis(port, '127.0.0.1')
  try {
    await admin.del(redisLockKeys(key).lock)
  } finally {
    admin.disconnect()
  }
}

const redisStore = (server: RedisServer): Store => ({
  ports: [server.port],
  urlVia: ([p]) => `redis://127.0.0.1:${p}`,
  logs: () => ({ redis: server.log() }),
  recoveryMs: 2000,
  async crash() {
    server.signal('SIGKILL')
    await server.restart()
  },
  expireEarly: (key) => deleteLockKey(server.port, key),
  close: () => server.destroy(),
})

export const targets: Record<string, Target> = {
  file: {
    name: 'file',
    networked: false,
    features: new Set(['expire']),
    async start(dir) {
      const locks = join(dir, 'locks')
      mkdirSync(locks, { recursive: true })
      return {
        ports: [],
        urlVia: () => `file://${locks}`,
        logs: () => ({}),
        recoveryMs: 1000,
        // What a tmp cleaner or an operator does: the key's whole folder (its hashed name) removed, `rm -rf`.
        // The lease goes with it; the fence must not (the root's .epoch stays). A writer's temp file can
        // land in the folder during the removal (ENOTEMPTY): remove again, as a cleaner's next pass would.
        async expireEarly(key) {
          const folder = join(locks, keyFolderName(key))
          for (let tries = 1; ; tries++) {
            try {
              return rmSync(folder, { recursive: true, force: true })
            } catch (error) {
              if ((error as NodeJS.ErrnoException).code !== 'ENOTEMPTY' || tries === 100) throw error
              await new Promise((resolve) => setTimeout(resolve, 1))
            }
          }
        },
        close: async () => {},
      }
    },
  },
  redis: {
    name: 'redis',
    networked: true,
    features: new Set(['crash', 'expire']),
    start: async () => redisStore(await startRedis()),
  },
  'redis-aof': {
    name: 'redis-aof',
    networked: true,
    features: new Set(['crash', 'durable']),
    start: async () =>
      redisStore(await startRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] })),
  },
  etcd: {
    name: 'etcd',
    networked: true,
    features: new Set(['crash', 'durable', 'expire']),
    start: async () => etcdStore(await startEtcd(1)),
  },
  'etcd-3': {
    name: 'etcd-3',
    networked: true,
    features: new Set(['leader', 'durable']),
    start: async () => etcdStore(await startEtcd(3)),
  },
  redlock: {
    name: 'redlock',
    networked: true,
    features: new Set(['redlock', 'expire']),
    async start() {
      const nodes = await startRedisNodes(3)
      return {
        ports: nodes.servers.map((s) => s.port),
        // The default restartDelay (the largest ttl) guards a restarted node.
        urlVia: (ports) => `redlock://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`,
        logs: () => Object.fromEntries(nodes.servers.map((s, i) => [`redis-node-${i}`, s.log()])),
        recoveryMs: 3000,
        async crash(node = 0) {
          const server = nodes.servers[node % nodes.servers.length]!
          server.signal('SIGKILL')
          await server.restart()
        },
        async expireEarly(key) {
          await Promise.all(nodes.servers.map((s) => deleteLockKey(s.port, key)))
        },
        close: () => nodes.destroy(),
      }
    },
  },
}

function etcdStore(cluster: EtcdCluster): Store {
  const hosts = cluster.members.map((m) => `http://${m.endpoint}`)
  return {
    ports: cluster.members.map((m) => m.clientPort),
    urlVia: (ports) => `etcd://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`,
    logs: () => Object.fromEntries(cluster.members.map((m) => [`etcd-${m.name}`, m.log()])),
    recoveryMs: 5000,
    async crash() {
      const member = cluster.members[0]!
      member.signal('SIGKILL')
      await member.restart()
    },
    async killLeader() {
      const leader = await cluster.leader()
      leader.signal('SIGKILL')
      await leader.restart()
    },
    async expireEarly(key) {
      // The holder is the first key of the lock's prefix by create revision.
      const admin = new Etcd3({ hosts })
      try {
        const first = await admin.getAll().prefix(lockPrefix(key)).sort('Create', 'Ascend').limit(1).keys()
        if (first[0]) await admin.delete().key(first[0]).exec()
      } finally {
        admin.close()
      }
    },
    close: () => cluster.destroy(),
  }
}
