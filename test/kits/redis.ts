/**
 * The Redis backend's kits: one primary (plain, fair, and with persistence) and a Redis Cluster of three
 * masters. A lease is broken by deleting its lock key (named by the backend's own `redisLockKeys`); the
 * fence counter stays, as it does through a real early expiry.
 */
import { Cluster, Redis } from 'ioredis'
import { DEFAULT_PREFIX } from '../../src/backends/redis/keys.js'
import { redisLockKeys } from '../../src/backends/redis/mutex/layout.js'
import { type RedisServer, startRedis, startRedisCluster } from '../servers/redis.js'
import { type Kit, type KitStore, RACE, ttlStore } from './kit.js'

/** Deletes a lock's key on one Redis server behind its holder's back (the backend's default prefix). */
export async function deleteLockKey(port: number, key: string): Promise<void> {
  const admin = new Redis(port, '127.0.0.1')
  try {
    await admin.del(redisLockKeys(key).lock)
  } finally {
    admin.disconnect()
  }
}

/**
 * What an operator's clean-up does: every key of the lock `key` (lease, fence, holder, fair queue, starvation mark), or
 * with `key` undefined every key under the backend's default prefix (SCAN + DEL, as a script would).
 */
export async function deleteRedisState(port: number, key?: string): Promise<void> {
  const admin = new Redis(port, '127.0.0.1')
  try {
    if (key !== undefined) {
      const { lock, fence, queue, waiters, ttls, holder, starving } = redisLockKeys(key)
      await admin.del(lock, fence, queue, waiters, ttls, holder, starving)
      return
    }
    let cursor = '0'
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${DEFAULT_PREFIX}*`, 'COUNT', 1000)
      if (keys.length > 0) await admin.del(...keys)
      cursor = next
    } while (cursor !== '0')
  } finally {
    admin.disconnect()
  }
}

/** Kills (SIGKILL) a server and starts it again on its port and folder, with whatever it persisted. */
export async function crashRedis(server: RedisServer): Promise<void> {
  server.signal('SIGKILL')
  await server.restart()
}

/** Freezes a server (SIGSTOP); the function returned resumes it (SIGCONT). */
export function pauseRedis(server: RedisServer): () => void {
  server.signal('SIGSTOP')
  return () => server.signal('SIGCONT')
}

function redisStore(server: RedisServer, kitQuery: string): KitStore {
  return {
    url: (query = kitQuery) => `${server.url}${query}`,
    ports: [server.port],
    urlVia: ([port], query = kitQuery) => `redis://127.0.0.1:${port}${query}`,
    breakLease: (key) => deleteLockKey(server.port, key),
    deleteState: (key) => deleteRedisState(server.port, key),
    crash: () => crashRedis(server),
    restart: () => crashRedis(server),
    pause: () => pauseRedis(server),
    logs: () => ({ redis: server.log() }),
    recoveryMs: 2000,
    close: () => server.destroy(),
  }
}

const NO_SESSION = 'leases end by the PX expiry on the server, no session'
const PLAIN = `plain mode: ${RACE} (fair=true queues them)`

// Fences survive a restart without persistence too: the server's clock is their floor (MINT in scripts.ts).
const capabilities = (fifo: boolean) => ttlStore({ fifo, durableFences: true })

export const redisKit: Kit = {
  id: 'redis',
  backend: 'redis',
  title: 'redis',
  entry: 'redis/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'multikey-atomic', 'resume', 'rwlock'],
  networked: true,
  capabilities: capabilities(false),
  lacks: { fifo: PLAIN, session: NO_SESSION },
  start: async () => redisStore(await startRedis(), ''),
  chaos: [{ name: 'redis', features: ['crash', 'expire', 'delete-state'] }],
  bench: [
    { name: 'fencelock redis', store: 'redis' },
    // On the same server as the peers: scenario h counts the commands a blocked waiter sends there.
    { name: 'fencelock redis (fair)', store: 'redis', query: '?fair=true' },
  ],
}

export const redisFairKit: Kit = {
  id: 'redis-fair',
  backend: 'redis',
  title: 'redis (fair)',
  entry: 'redis/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'resume', 'rwlock'],
  networked: true,
  capabilities: capabilities(true),
  lacks: { session: NO_SESSION },
  start: async () => redisStore(await startRedis(), '?fair=true'),
}

/** Every write appended and fsynced before the reply: what a crash must not lose. */
export const redisAofKit: Kit = {
  id: 'redis-aof',
  backend: 'redis',
  title: 'redis (appendonly, fsync always)',
  entry: 'redis/conformance',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'multikey-atomic', 'resume', 'rwlock'],
  networked: true,
  capabilities: capabilities(false),
  lacks: { fifo: PLAIN, session: NO_SESSION },
  start: async () =>
    redisStore(await startRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] }), ''),
  chaos: [{ name: 'redis-aof', features: ['crash', 'durable'] }],
}

export const redisClusterKit: Kit = {
  id: 'redis-cluster',
  backend: 'redis',
  title: 'redis (cluster of 3 masters)',
  entry: 'redis/conformance-cluster',
  primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'resume', 'rwlock'],
  networked: true,
  capabilities: { ...capabilities(false), durableFences: false },
  lacks: { fifo: PLAIN, session: NO_SESSION, durableFences: 'the test cluster cannot restart its nodes' },
  async start(): Promise<KitStore> {
    const cluster = await startRedisCluster(3)
    const admin = new Cluster([{ host: '127.0.0.1', port: cluster.nodes[0]!.port }])
    // No urlVia: a cluster client follows the nodes' own addresses (MOVED), around any proxy.
    return {
      url: (query = '') => `${cluster.url}${query.replace(/^\?/, '&')}`,
      ports: cluster.nodes.map((n) => n.port),
      breakLease: async (key) => {
        await admin.del(redisLockKeys(key).lock)
      },
      pause: (node = 0) => pauseRedis(cluster.nodes[node % cluster.nodes.length]!),
      logs: () => Object.fromEntries(cluster.nodes.map((n, i) => [`redis-node-${i}`, n.log()])),
      recoveryMs: 2000,
      async close() {
        admin.disconnect()
        await cluster.destroy()
      },
    }
  },
}
