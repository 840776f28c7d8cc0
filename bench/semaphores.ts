/**
 * What the semaphore bench (semaphore-run.ts) measures, as contenders: fencelock's counting semaphore on each
 * store that has one (the kits that declare `semaphore` and have a bench store), redis-semaphore's
 * `Semaphore` (the peer) on the same Redis, and a hand-written floor per store: here Redis (one Lua script per
 * try, no waiting line, no renewal: the least work Redis allows for a counting permit) and memory, the
 * others in semaphore-floors.ts, the slots floors in semaphore-slots.ts. Every contender is made with the same lease length, `ttlMs`, and one
 * client (its own connections), as one process of an application.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import { Semaphore as RedisSemaphore, RedlockSemaphore } from 'redis-semaphore'
import { createLockClient } from '../src/index.js'
import { KITS } from '../test/kits/index.js'
import type { Env } from './adapter.js'
import { permitId, SEMAPHORE_FLOORS } from './semaphore-floors.js'
import { redisNodes, SLOTS_FLOORS } from './semaphore-slots.js'

/** Permits held: release gives them back. */
export interface Permit {
  release(): Promise<void>
}

/** One contender's client: waits for a permit of the semaphore `name` opened with `limit`. */
export interface Contender {
  acquire(name: string, limit: number): Promise<Permit>
  close(): Promise<void>
}

export interface SemaphoreAdapter {
  readonly name: string
  /** The store, as bench/adapter.ts names it: rows of one store are compared with each other. */
  readonly store: string
  readonly kind: 'fencelock' | 'peer' | 'floor'
  readonly note?: string
  contender(env: Env, ttlMs: number): Promise<Contender>
}

/**
 * fencelock on the URL its kit's store gave for the bench variant `variant` (the runner starts the stores),
 * with the counting layout or the slots one; the slots row is named after the variant, "(slots)" added.
 */
function fencelock(variant: { name: string; store: string }, layout: 'counting' | 'slots'): SemaphoreAdapter {
  return {
    name: layout === 'slots' ? `${variant.name} (slots)` : variant.name,
    store: variant.store,
    kind: 'fencelock',
    ...(layout === 'slots' ? { note: "layout: 'slots'" } : {}),
    async contender(env, ttlMs) {
      const url = env.urls[variant.name]
      if (url === undefined) throw new Error(`no store was started for ${variant.name}`)
      const client = createLockClient(url, { ttl: ttlMs })
      return {
        acquire: (semaphore, limit) =>
          layout === 'slots'
            ? client.semaphore(semaphore, { limit, layout }).acquire()
            : client.semaphore(semaphore, { limit }).acquire(),
        close: () => client.close(),
      }
    },
  }
}

/** The benched kits that offer `primitive`, each by its first bench variant (the default URL). */
const benched = (primitive: 'semaphore' | 'slots') =>
  KITS.filter((k) => k.primitives.includes(primitive) && k.bench?.length).map((k) => k.bench![0]!)

/**
 * fencelock's counting semaphore on every store whose kit counts permits, and its slots layout on every
 * benched store (the only semaphore on Redlock, S3, GCS and DynamoDB; beside the counting one elsewhere,
 * so that the layout's cost shows).
 */
const FENCELOCK: SemaphoreAdapter[] = [
  ...benched('semaphore').map((v) => fencelock(v, 'counting')),
  ...benched('slots').map((v) => fencelock(v, 'slots')),
]

/** A redis-semaphore class, as a peer: `make` opens one semaphore on the contender's Redis connections. */
function redisSemaphorePeer(
  peer: Pick<SemaphoreAdapter, 'name' | 'store' | 'note'>,
  make: (nodes: Redis[], name: string, limit: number, ttlMs: number) => RedisSemaphore | RedlockSemaphore,
): SemaphoreAdapter {
  return {
    ...peer,
    kind: 'peer',
    async contender(env, ttlMs) {
      const nodes = peer.store === 'redis x5' ? redisNodes(env.redis5) : redisNodes([env.redis])
      return {
        async acquire(name, limit) {
          const semaphore = make(nodes, name, limit, ttlMs)
          await semaphore.acquire()
          return { release: () => semaphore.release() }
        },
        close: async () => {
          for (const node of nodes) node.disconnect()
        },
      }
    },
  }
}

const PEER_OPTIONS = (ttlMs: number) => ({ lockTimeout: ttlMs, acquireTimeout: 60_000 })

/** redis-semaphore's `Semaphore` with its defaults (a 10 ms retry interval), renewing at its default pace. */
const redisSemaphore = redisSemaphorePeer(
  {
    name: 'redis-semaphore Semaphore',
    store: 'redis',
    note: 'retryInterval 10 ms (its default), acquireTimeout 60 s; expiry on the client’s clock',
  },
  ([node], name, limit, ttlMs) => new RedisSemaphore(node!, name, limit, PEER_OPTIONS(ttlMs)),
)

/**
 * redis-semaphore's `RedlockSemaphore`, with its defaults, beside fencelock's slots on Redlock: it runs its
 * counting script on every node and is granted on a majority of counts, which can admit more than the limit
 * (the nodes' counts need not agree on who is in), so it is a peer to compare costs with, not a floor;
 * scenario t's overlaps show what it admitted.
 */
const redlockSemaphore = redisSemaphorePeer(
  {
    name: 'redis-semaphore RedlockSemaphore',
    store: 'redis x5',
    note: 'a counting sorted set per node, granted on a majority of counts (not a safe limit); retryInterval 10 ms (its default)',
  },
  (nodes, name, limit, ttlMs) => new RedlockSemaphore(nodes, name, limit, PEER_OPTIONS(ttlMs)),
)

/**
 * The floor's try: drop the expired permits (a sorted set scored by expiry on the server's clock), count
 * the rest, add ours when it fits. 1 when granted.
 */
const TRY = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
  return 1
end
return 0`

const redisFloor: SemaphoreAdapter = {
  name: 'raw floor: redis Lua ZREMRANGEBYSCORE+ZCARD+ZADD',
  store: 'redis',
  kind: 'floor',
  note: 'one script per try (server TIME), ZREM to release; retries every 1 ms; no line, no renewal, no limit check',
  async contender(env, ttlMs) {
    const [client] = redisNodes([env.redis]) as [Redis]
    return {
      async acquire(name, limit) {
        const key = `bench-floor:${name}`
        const id = permitId()
        // The bench's own wait: the floor has no line to wait in, so it tries again.
        while ((await client.eval(TRY, 1, key, limit, ttlMs, id)) !== 1) await sleep(1)
        return {
          release: async () => {
            await client.zrem(key, id)
          },
        }
      },
      close: async () => {
        client.disconnect()
      },
    }
  },
}

/** The memory floor's semaphores, by name: a count and a line of waiters, shared by every contender here. */
const counts = new Map<string, { held: number; line: Array<() => void> }>()

const memoryFloor: SemaphoreAdapter = {
  name: 'raw floor: memory count + line',
  store: 'memory',
  kind: 'floor',
  note: 'a counter and a FIFO of waiters in this process; no lease, no expiry',
  async contender() {
    return {
      async acquire(name, limit) {
        const s = counts.get(name) ?? { held: 0, line: [] }
        counts.set(name, s)
        if (s.held < limit && s.line.length === 0) s.held++
        // A release hands its permit to the first in line, so the count does not drop in between.
        else await new Promise<void>((resolve) => s.line.push(resolve))
        return {
          release: async () => {
            const next = s.line.shift()
            if (next) next()
            else s.held--
          },
        }
      },
      close: async () => {},
    }
  },
}

const ALL = [
  ...FENCELOCK,
  redisSemaphore,
  redlockSemaphore,
  redisFloor,
  memoryFloor,
  ...SEMAPHORE_FLOORS,
  ...SLOTS_FLOORS,
]

/** Every semaphore adapter, by store: fencelock's first, then the peer and the floor of that store. */
export const SEMAPHORE_ADAPTERS: SemaphoreAdapter[] = [...new Set(ALL.map((a) => a.store))].flatMap((store) =>
  ALL.filter((a) => a.store === store),
)
