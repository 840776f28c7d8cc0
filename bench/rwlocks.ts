/**
 * What the read-write lock bench (rwlock-run.ts) measures, as contenders: fencelock's read-write lock on each
 * store whose kit declares `rwlock` and has a bench store, and a hand-written floor per store: here memory
 * (a fair line in this process) and Redis (Redisson's `RReadWriteLock` rewritten), the others in
 * rwlock-floors.ts. Every contender is made with the same lease length and one client of its own, as one
 * process of an application.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { createLockClient } from '../src/index.js'
import { KITS } from '../test/kits/index.js'
import type { Env } from './adapter.js'
import { RWLOCK_FLOORS } from './rwlock-floors.js'
import { armed } from './wake.js'

export type RwMode = 'read' | 'write'

/** A read or write lease held: release gives it back. */
export interface RwHeld {
  release(): Promise<void>
}

/** One contender's client: waits for the read-write lock `name` in `mode`. */
export interface RwContender {
  acquire(name: string, mode: RwMode): Promise<RwHeld>
  close(): Promise<void>
}

export interface RwLockAdapter {
  readonly name: string
  /** The store, as bench/adapter.ts names it: rows of one store are compared with each other. */
  readonly store: string
  readonly kind: 'fencelock' | 'floor'
  readonly note?: string
  contender(env: Env, ttlMs: number): Promise<RwContender>
}

/** The longest a fencelock acquire waits in the bench: far beyond any scenario, so that none gives up. */
const ACQUIRE_TIMEOUT_MS = 300_000

/** fencelock on every store whose kit has read-write locks and is benched: its first bench variant. */
const FENCELOCK: RwLockAdapter[] = KITS.filter((k) => k.primitives.includes('rwlock') && k.bench?.length).map(
  (k) => {
    const { name, store } = k.bench![0]!
    return {
      name,
      store,
      kind: 'fencelock',
      async contender(env, ttlMs) {
        const url = env.urls[name]
        if (url === undefined) throw new Error(`no store was started for ${name}`)
        const client = createLockClient(url, { ttl: ttlMs, timeout: ACQUIRE_TIMEOUT_MS })
        return {
          acquire: (lock, mode) => client.rwlock(lock)[mode](),
          close: () => client.close(),
        }
      },
    }
  },
)

/** The memory floor's locks, by name: holders and one line in arrival order, shared by every contender here. */
const memoryLocks = new Map<
  string,
  { readers: number; writer: boolean; line: { mode: RwMode; grant(): void }[] }
>()

const memoryFloor: RwLockAdapter = {
  name: 'raw floor: memory counts + one line',
  store: 'memory',
  kind: 'floor',
  note: 'a reader count, a writer flag and a FIFO line in this process (a reader waits behind a waiting writer); no lease',
  async contender() {
    return {
      async acquire(name, mode) {
        const lock = memoryLocks.get(name) ?? { readers: 0, writer: false, line: [] }
        memoryLocks.set(name, lock)
        const fits = (m: RwMode) => !lock.writer && (m === 'read' || lock.readers === 0)
        const take = (m: RwMode) => {
          if (m === 'read') lock.readers++
          else lock.writer = true
        }
        if (lock.line.length === 0 && fits(mode)) take(mode)
        else await new Promise<void>((grant) => lock.line.push({ mode, grant }))
        return {
          release: async () => {
            if (mode === 'read') lock.readers--
            else lock.writer = false
            // Admits from the head of the line while the head fits: the granted are counted before they run.
            while (lock.line.length > 0 && fits(lock.line[0]!.mode)) {
              const next = lock.line.shift()!
              take(next.mode)
              next.grant()
            }
          },
        }
      },
      close: async () => {},
    }
  },
}

/**
 * Redisson's `RReadWriteLock` (RedissonReadLock.java, RedissonWriteLock.java) rewritten as the Redis floor:
 * one hash per lock holding `mode` ("read" or "write") and a count per holder, one expiry on the hash.
 * A reader is let in whenever the mode is absent or "read", whoever waits; a writer only when the hash is
 * absent. Not fair: a waiting writer holds no place, so readers that keep overlapping keep it out, which is
 * what scenario m measures. Left out of Redisson's scripts: reentrancy by thread, one expiry key per
 * reader (here the hash lives as long as its longest reader), the watchdog's renewal, the unlock latch.
 *
 * Read: KEYS[1] the hash; ARGV[1] the lease in ms, ARGV[2] the holder. Nil when granted, else the hash's
 * remaining ms (how long a waiter that hears nothing waits before it tries again).
 */
const READ = `local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
  return nil
end
return redis.call('pttl', KEYS[1])`

/** Write: as READ; granted only when nobody holds the lock. */
const WRITE = `if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`

/**
 * Release (either mode): KEYS[1] the hash, KEYS[2] the channel; ARGV[1] the holder. Counts the holder down;
 * when nobody is left, deletes the hash and publishes, which wakes every waiter of the lock.
 */
const RELEASE = `if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then redis.call('hdel', KEYS[1], ARGV[1]) end
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], 'unlock')
end
return 1`

let holderIds = 0

const redisFloor: RwLockAdapter = {
  name: 'raw floor: Redisson-style RReadWriteLock (Lua hash + pub/sub)',
  store: 'redis',
  kind: 'floor',
  note: 'one script to acquire, one to release; a waiter subscribes to the lock’s channel and tries again at each unlock (or when the hash’s lease ends); not fair: readers pass a waiting writer; no renewal',
  async contender(env, ttlMs) {
    const client = new Redis(env.redis, '127.0.0.1', { maxRetriesPerRequest: 1 })
    const subscriber = new Redis(env.redis, '127.0.0.1', { maxRetriesPerRequest: 1 })
    /** Waiters of each channel this contender subscribed to: every unlock wakes them all, as Redisson's. */
    const waiters = new Map<string, Set<() => void>>()
    subscriber.on('message', (channel: string) => {
      for (const wake of waiters.get(channel) ?? []) wake()
    })
    return {
      async acquire(name, mode) {
        const keys = [`bench-rw-floor:{${name}}`, `bench-rw-floor-unlock:{${name}}`] as const
        const holder = `${process.pid}-${holderIds++}`
        let wakes = waiters.get(keys[1])
        if (!wakes) {
          wakes = new Set()
          waiters.set(keys[1], wakes)
          await subscriber.subscribe(keys[1])
        }
        for (;;) {
          // Armed before the try: an unlock published between the try and the wait is not missed.
          const { woken, wake } = armed()
          wakes.add(wake)
          const left = (await client.eval(mode === 'read' ? READ : WRITE, 1, keys[0], ttlMs, holder)) as
            | number
            | null
          if (left === null) {
            wakes.delete(wake)
            break
          }
          // Woken by an unlock, or once the holders' lease has ended (a holder that died unlocks nothing).
          const expiry = new AbortController()
          await Promise.race([
            woken,
            sleep(Math.max(1, left), undefined, { signal: expiry.signal }).catch(() => {}),
          ])
          expiry.abort()
          wakes.delete(wake)
        }
        return { release: async () => void (await client.eval(RELEASE, 2, ...keys, holder)) }
      },
      close: async () => {
        client.disconnect()
        subscriber.disconnect()
      },
    }
  },
}

const ALL = [...FENCELOCK, memoryFloor, redisFloor, ...RWLOCK_FLOORS]

/** Every read-write lock adapter, by store: fencelock's first, then the floor of that store. */
export const RWLOCK_ADAPTERS: RwLockAdapter[] = [...new Set(ALL.map((a) => a.store))].flatMap((store) =>
  ALL.filter((a) => a.store === store),
)
