/**
 * Everything the benchmark measures, as adapters: fencelock on each backend, the peer libraries people use
 * today (with their defaults and, where they have one, a tuned polling setting), and raw floors written
 * directly with the clients. fencelock's adapters come from the test kits (test/kits: each kit's `bench`),
 * so a later backend joins with its kit; the peers of a new store join here.
 */
import { randomBytes } from 'node:crypto'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Redlock as SesameRedlock } from '@sesamecare-oss/redlock'
import { Mutex as AsyncMutex } from 'async-mutex'
import { Etcd3, EtcdLockFailedError } from 'etcd3'
import { Redis } from 'ioredis'
import lockfile from 'proper-lockfile'
import { RedlockMutex, Mutex as SemaphoreMutex } from 'redis-semaphore'
import Redlock from 'redlock'
import { createLockClient } from '../src/index.js'
import { KITS } from '../test/kits/index.js'
import type { Adapter } from './adapter.js'
import { CLOUD_ADAPTERS } from './cloud.js'
import { mysqlFloor } from './mysql.js'
import { POSTGRES_ADAPTERS } from './postgres.js'
import { ZOOKEEPER_ADAPTERS } from './zookeeper.js'

const TTL = 30_000
const sharedAsyncMutexes = new Map<string, AsyncMutex>()
const redisClient = (port: number) => new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 })
const disconnect = async (...clients: Redis[]) => {
  for (const c of clients) c.disconnect()
}

/** fencelock on the URL its kit's store gave for `name` (run.ts starts the kits' stores). */
const fencelock = (name: string, store: string, note?: string): Adapter => ({
  name,
  store,
  kind: 'fencelock',
  fences: true,
  waits: true,
  ...(note ? { note } : {}),
  async createLocker(env) {
    const url = env.urls[name]
    if (url === undefined) throw new Error(`no store was started for ${name}`)
    const client = createLockClient(url, { ttl: TTL, renew: false })
    return { acquire: (key) => client.acquire(key), close: () => client.close() }
  },
})

/** fencelock's adapters: each kit's bench variants. */
export const FENCELOCK_ADAPTERS: Adapter[] = KITS.flatMap((kit) =>
  (kit.bench ?? []).map((v) => fencelock(v.name, v.store, v.note)),
)

const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`
/** Grant and mint a fence in one step (nil when held). */
const FENCED_ACQUIRE = `if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return redis.call('INCR', KEYS[2]) end return nil`
const NOTIFY_RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) redis.call('PUBLISH', ARGV[2], '') end return 0`

const PEERS: Adapter[] = [
  {
    name: 'async-mutex',
    store: 'memory',
    kind: 'peer',
    fences: false,
    waits: true,
    note: 'in-process only, no lease',
    async createLocker() {
      return {
        async acquire(key) {
          let mutex = sharedAsyncMutexes.get(key)
          if (!mutex) {
            mutex = new AsyncMutex()
            sharedAsyncMutexes.set(key, mutex)
          }
          const release = await mutex.acquire()
          return { release: async () => release() }
        },
        close: async () => {},
      }
    },
  },
  ...(['defaults', 'tuned'] as const).map(
    (mode): Adapter => ({
      name: `proper-lockfile (${mode})`,
      store: 'file',
      kind: 'peer',
      fences: false,
      waits: true,
      note: mode === 'defaults' ? 'retries: 0 — fails at once when held' : 'retries 10000, 5–50 ms backoff',
      async createLocker(env) {
        const folder = join(env.dir, 'proper-lockfile')
        mkdirSync(folder, { recursive: true })
        return {
          async acquire(key) {
            const file = join(folder, key.replace(/[^a-z0-9]/gi, '_'))
            const options =
              mode === 'defaults'
                ? { realpath: false }
                : {
                    realpath: false,
                    retries: { retries: 10_000, minTimeout: 5, maxTimeout: 50, factor: 1.5 },
                  }
            writeFileSync(file, '', { flag: 'a' })
            const release = await lockfile.lock(file, options)
            return { release }
          },
          close: async () => {},
        }
      },
    }),
  ),
  ...(['defaults', 'tuned'] as const).map(
    (mode): Adapter => ({
      name: `redis-semaphore Mutex (${mode})`,
      store: 'redis',
      kind: 'peer',
      fences: false,
      waits: true,
      note:
        mode === 'defaults'
          ? 'retryInterval 10 ms, acquireTimeout 10 s'
          : 'retryInterval 1 ms, acquireTimeout 60 s',
      async createLocker(env) {
        const client = redisClient(env.redis)
        const options =
          mode === 'defaults'
            ? { lockTimeout: TTL, refreshInterval: 0 }
            : { lockTimeout: TTL, refreshInterval: 0, retryInterval: 1, acquireTimeout: 60_000 }
        return {
          async acquire(key) {
            const mutex = new SemaphoreMutex(client, key, options)
            await mutex.acquire()
            return { release: () => mutex.release() }
          },
          close: () => disconnect(client),
        }
      },
    }),
  ),
  ...(
    [
      ['redlock@5.0.0-beta.2', Redlock],
      ['@sesamecare-oss/redlock', SesameRedlock],
    ] as const
  ).flatMap(([label, Impl]) =>
    (['defaults', 'tuned'] as const).map(
      (mode): Adapter => ({
        name: `${label} 1 node (${mode})`,
        store: 'redis',
        kind: 'peer',
        fences: false,
        waits: true,
        note:
          mode === 'defaults'
            ? 'retryCount 10, retryDelay 200 ms'
            : 'retryCount -1 (forever), retryDelay 5 ms',
        async createLocker(env) {
          const client = redisClient(env.redis)
          const redlock = new Impl(
            [client],
            mode === 'defaults' ? {} : { retryCount: -1, retryDelay: 5, retryJitter: 5 },
          )
          redlock.on('error', () => {})
          return {
            async acquire(key) {
              const lock = await redlock.acquire([key], TTL)
              return { release: async () => void (await lock.release()) }
            },
            close: () => disconnect(client),
          }
        },
      }),
    ),
  ),
  {
    name: 'raw floor: SET NX PX + EVALSHA del',
    store: 'redis',
    kind: 'floor',
    fences: false,
    waits: false,
    note: 'two round trips, no fence, never waits',
    async createLocker(env) {
      const client = redisClient(env.redis)
      const sha = (await client.script('LOAD', RELEASE)) as string
      return {
        async acquire(key) {
          const owner = randomBytes(16).toString('hex')
          if ((await client.set(key, owner, 'PX', TTL, 'NX')) !== 'OK') throw new Error(`${key} is held`)
          return { release: async () => void (await client.evalsha(sha, 1, key, owner)) }
        },
        close: () => disconnect(client),
      }
    },
  },
  {
    name: 'raw floor: fenced, one script each way',
    store: 'redis',
    kind: 'floor',
    fences: true,
    waits: false,
    note: 'the least a fenced lock does: one script grants and INCRs the fence (SET NX would not tell the fence to this grant alone), one compare-and-delete; never waits',
    async createLocker(env) {
      const client = redisClient(env.redis)
      const acquireSha = (await client.script('LOAD', FENCED_ACQUIRE)) as string
      const releaseSha = (await client.script('LOAD', RELEASE)) as string
      return {
        async acquire(key) {
          const owner = randomBytes(16).toString('hex')
          const fence = (await client.evalsha(acquireSha, 2, key, `${key}:fence`, owner, TTL)) as
            | number
            | null
          if (fence === null) throw new Error(`${key} is held`)
          return { release: async () => void (await client.evalsha(releaseSha, 1, key, owner)) }
        },
        close: () => disconnect(client),
      }
    },
  },
  {
    name: 'raw floor: SET NX + pub/sub wake-up',
    store: 'redis',
    kind: 'floor',
    fences: false,
    waits: true,
    note: 'the least a notified lock does: SET NX PX; on refusal wait for the release message (subscribed once per key, kept); no fence',
    async createLocker(env) {
      const client = redisClient(env.redis)
      const subscriber = redisClient(env.redis)
      const sha = (await client.script('LOAD', NOTIFY_RELEASE)) as string
      const wakers = new Map<string, Set<() => void>>()
      // Subscribed once per channel and kept: a SUBSCRIBE per attempt would be a round trip the floor
      // does not need (it made this floor slower than the least work the store allows).
      const subscribed = new Map<string, Promise<unknown>>()
      subscriber.on('message', (channel: string) => {
        for (const wake of wakers.get(channel) ?? []) wake()
      })
      return {
        async acquire(key) {
          const owner = randomBytes(16).toString('hex')
          const channel = `${key}:released`
          for (;;) {
            let wake: () => void = () => {}
            const woken = new Promise<void>((resolve) => {
              wake = resolve
            })
            const set = wakers.get(channel) ?? new Set()
            wakers.set(channel, set.add(wake))
            let subscribing = subscribed.get(channel)
            if (subscribing === undefined) {
              subscribing = subscriber.subscribe(channel)
              subscribed.set(channel, subscribing)
            }
            await subscribing
            const ok = (await client.set(key, owner, 'PX', TTL, 'NX')) === 'OK'
            if (!ok) await Promise.race([woken, new Promise((r) => setTimeout(r, 1000))])
            set.delete(wake)
            if (ok) return { release: async () => void (await client.evalsha(sha, 1, key, owner, channel)) }
          }
        },
        close: () => disconnect(client, subscriber),
      }
    },
  },
  ...(['defaults', 'tuned'] as const).map(
    (mode): Adapter => ({
      name: `etcd3 Lock + retry loop (${mode === 'defaults' ? '50 ms' : '5 ms'})`,
      store: 'etcd',
      kind: 'peer',
      fences: false,
      waits: true,
      note:
        "etcd3's Lock never waits (it throws EtcdLockFailedError when held): wrapped in a retry loop with " +
        `${mode === 'defaults' ? '50' : '5'} ms ± 50 % jitter. Each attempt grants a lease, a txn, and revokes it on release`,
      async createLocker(env) {
        const client = new Etcd3({ hosts: `http://${env.etcd}` })
        const pause = mode === 'defaults' ? 50 : 5
        return {
          async acquire(key) {
            for (;;) {
              const lock = client.lock(key).ttl(TTL / 1000)
              try {
                await lock.acquire()
                return { release: () => lock.release() }
              } catch (error) {
                if (!(error instanceof EtcdLockFailedError)) throw error
                await new Promise((r) => setTimeout(r, pause / 2 + Math.random() * pause))
              }
            }
          },
          close: async () => client.close(),
        }
      },
    }),
  ),
  {
    name: 'raw floor: etcd txn put-if-absent + delete',
    store: 'etcd',
    kind: 'floor',
    fences: false,
    waits: false,
    note: 'one txn (create revision = 0 → put) and one delete, no lease, no waiting',
    async createLocker(env) {
      const client = new Etcd3({ hosts: `http://${env.etcd}` })
      return {
        async acquire(key) {
          const done = await client.if(key, 'Create', '==', 0).then(client.put(key).value('x')).commit()
          if (!done.succeeded) throw new Error('held')
          return { release: async () => void (await client.delete().key(key)) }
        },
        close: async () => client.close(),
      }
    },
  },
  {
    name: 'redlock@5.0.0-beta.2 5 nodes',
    store: 'redis x5',
    kind: 'peer',
    fences: false,
    waits: true,
    async createLocker(env) {
      const clients = env.redis5.map(redisClient)
      // Finite retries (about 10 s): with retryCount -1 an acquire under contention sometimes never
      // returned (in b and bp, growing past 500 MB); this way it fails, is counted, and the worker goes on.
      const redlock = new Redlock(clients, { retryCount: 2000, retryDelay: 5, retryJitter: 5 })
      redlock.on('error', () => {})
      return {
        async acquire(key) {
          const lock = await redlock.acquire([key], TTL)
          return { release: async () => void (await lock.release()) }
        },
        close: () => disconnect(...clients),
      }
    },
  },
  {
    name: 'redis-semaphore RedlockMutex 5 nodes',
    store: 'redis x5',
    kind: 'peer',
    fences: false,
    waits: true,
    async createLocker(env) {
      const clients = env.redis5.map(redisClient)
      return {
        async acquire(key) {
          const mutex = new RedlockMutex(clients, key, {
            lockTimeout: TTL,
            refreshInterval: 0,
            retryInterval: 1,
          })
          await mutex.acquire()
          return { release: () => mutex.release() }
        },
        close: () => disconnect(...clients),
      }
    },
  },
  {
    name: 'raw floor: 5 nodes, 3 of 5 replies',
    store: 'redis x5',
    kind: 'floor',
    fences: false,
    waits: false,
    note: 'SET NX PX on all 5 in parallel, decided at the 3rd reply; release waits for 3',
    async createLocker(env) {
      const clients = env.redis5.map(redisClient)
      const shas = await Promise.all(clients.map((c) => c.script('LOAD', RELEASE) as Promise<string>))
      const quorum = <T>(promises: Array<Promise<T>>, ok: (v: T) => boolean) =>
        new Promise<boolean>((resolve) => {
          let yes = 0
          let no = 0
          for (const p of promises) {
            p.then(
              (v) => (ok(v) ? ++yes : ++no),
              () => ++no,
            ).then(() => {
              if (yes >= 3) resolve(true)
              else if (no >= 3) resolve(false)
            })
          }
        })
      return {
        async acquire(key) {
          const owner = randomBytes(16).toString('hex')
          const granted = await quorum(
            clients.map((c) => c.set(key, owner, 'PX', TTL, 'NX')),
            (v) => v === 'OK',
          )
          const release = async () => {
            await quorum(
              clients.map((c, i) => c.evalsha(shas[i]!, 1, key, owner)),
              () => true,
            )
          }
          if (!granted) {
            await release()
            throw new Error(`${key} is held`)
          }
          return { release }
        },
        close: () => disconnect(...clients),
      }
    },
  },
  ...CLOUD_ADAPTERS,
  mysqlFloor,
  ...POSTGRES_ADAPTERS,
  ...ZOOKEEPER_ADAPTERS,
]

/** Every adapter, by store: fencelock's first, then the peers and floors of that store. */
export const ADAPTERS: Adapter[] = [
  ...new Set([...FENCELOCK_ADAPTERS, ...PEERS].map((a) => a.store)),
].flatMap((store) => [...FENCELOCK_ADAPTERS, ...PEERS].filter((a) => a.store === store))
