/**
 * What the semaphore bench (semaphore-run.ts) measures, as contenders: fencelock's counting semaphore on each
 * store that has one (the kits that declare `semaphore` and have a bench store), redis-semaphore's
 * `Semaphore` (the peer) on the same Redis, and a hand-written floor per store: here Redis (one Lua script per
 * try, no waiting line, no renewal: the least work Redis allows for a counting permit) and memory, the
 * others in semaphore-floors.ts. Every contender is made with the same lease length, `ttlMs`, and one
 * client (its own connections), as one process of an application.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { Semaphore as RedisSemaphore } from 'redis-semaphore'
import { createLockClient } from '../src/index.js'
import { KITS } from '../test/kits/index.js'
import type { Env } from './adapter.js'
import { permitId, SEMAPHORE_FLOORS } from './semaphore-floors.js'

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

const redisClient = (port: number) => new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 })

/** fencelock on the URL its kit's store gave for the bench variant `name` (the runner starts the stores). */
const fencelock = (name: string, store: string): SemaphoreAdapter => ({
  name,
  store,
  kind: 'fencelock',
  async contender(env, ttlMs) {
    const url = env.urls[name]
    if (url === undefined) throw new Error(`no store was started for ${name}`)
    const client = createLockClient(url, { ttl: ttlMs })
    return {
      acquire: (semaphore, limit) => client.semaphore(semaphore, { limit }).acquire(),
      close: () => client.close(),
    }
  },
})

/** fencelock on every store whose kit counts permits and is benched: its first bench variant (the default URL). */
const FENCELOCK: SemaphoreAdapter[] = KITS.filter(
  (k) => k.primitives.includes('semaphore') && k.bench?.length,
).map((k) => fencelock(k.bench![0]!.name, k.bench![0]!.store))

/** redis-semaphore's `Semaphore` with its defaults (a 10 ms retry interval), renewing at its default pace. */
const redisSemaphore: SemaphoreAdapter = {
  name: 'redis-semaphore Semaphore',
  store: 'redis',
  kind: 'peer',
  note: 'retryInterval 10 ms (its default), acquireTimeout 60 s; expiry on the client’s clock',
  async contender(env, ttlMs) {
    const client = redisClient(env.redis)
    return {
      async acquire(name, limit) {
        const semaphore = new RedisSemaphore(client, name, limit, {
          lockTimeout: ttlMs,
          acquireTimeout: 60_000,
        })
        await semaphore.acquire()
        return { release: () => semaphore.release() }
      },
      close: async () => {
        client.disconnect()
      },
    }
  },
}

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
    const client = redisClient(env.redis)
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

const ALL = [...FENCELOCK, redisSemaphore, redisFloor, memoryFloor, ...SEMAPHORE_FLOORS]

/** Every semaphore adapter, by store: fencelock's first, then the peer and the floor of that store. */
export const SEMAPHORE_ADAPTERS: SemaphoreAdapter[] = [...new Set(ALL.map((a) => a.store))].flatMap((store) =>
  ALL.filter((a) => a.store === store),
)
