/**
 * The Redlock backend's kits: 5 and 3 independent Redis masters. A lease is broken on every node (its key
 * named by the Redis backend's `redisLockKeys`, which each Redlock node is); the fence counters stay.
 */
import { startRedisNodes } from '../servers/redis.js'
import { type Kit, type KitStore, loopback, RACE, ttlStore } from './kit.js'
import { crashRedis, deleteLockKey, pauseRedis } from './redis.js'

/**
 * The servers are seconds old, so the delayed-restart rule (a node counts once it has been up for the
 * largest ttl in use) is turned off with restartDelay=0; redlock/faults.test.ts and the chaos target
 * (S6: nodes restarted empty) keep the default.
 */
const QUERY = '?restartDelay=0'

function redlockKit(count: number): Kit {
  return {
    id: `redlock-${count}`,
    backend: 'redlock',
    title: `redlock (${count} nodes)`,
    entry: 'redlock/conformance',
    primitives: ['mutex', 'slots', 'election', 'multikey', 'resume'],
    networked: true,
    capabilities: ttlStore(),
    // Another client reads the token M from the nodes' counters; its node index may differ (src/engines/quorum/break.ts).
    grantOfFence: (fence) => fence >> 8n,
    lacks: {
      fifo: RACE,
      session: 'leases end by the PX expiry on each node, no session',
      durableFences:
        'the nodes run without persistence: restarting every node forgets the fence counters (one node restarted at a time is survived: redlock/faults.test.ts, chaos S6)',
    },
    async start(): Promise<KitStore> {
      const nodes = await startRedisNodes(count)
      const { servers } = nodes
      const server = (node = 0) => servers[node % servers.length]!
      return {
        url: (query = QUERY) => nodes.url(query),
        ports: servers.map((s) => s.port),
        urlVia: (ports, query = QUERY) => `redlock://${loopback(ports)}${query}`,
        // Every node forgets the lease, as an early expiry would; the fence counters stay.
        breakLease: async (key) => {
          await Promise.all(servers.map((s) => deleteLockKey(s.port, key)))
        },
        crash: (node) => crashRedis(server(node)),
        pause: (node) => pauseRedis(server(node)),
        logs: () => Object.fromEntries(servers.map((s, i) => [`redis-node-${i}`, s.log()])),
        recoveryMs: 3000,
        close: () => nodes.destroy(),
      }
    },
  }
}

export const redlock5Kit: Kit = {
  ...redlockKit(5),
  bench: [
    {
      name: 'fencelock redlock 5 nodes',
      store: 'redis x5',
      note: 'fences (max of the majority, written back where behind); restartDelay=0 because the servers are seconds old',
    },
  ],
}

export const redlock3Kit: Kit = {
  ...redlockKit(3),
  // The default restartDelay (the largest ttl) guards a restarted node.
  chaos: [{ name: 'redlock', features: ['redlock', 'expire'], query: '' }],
}
