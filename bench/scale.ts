/**
 * The scale scenarios (run by scale-run.ts): what grows with the number of names, held locks, waiters and
 * workers. s1 what stays in the store per distinct name once every lock is released and every ttl passed;
 * s2 many locks held by one client, renewed (lost, renewal rate, client CPU, event-loop delay); s3 many
 * waiters on one key across 4 processes (requests per grant, handoff, idle requests); s4 throughput of
 * 8→64 workers over 10,000 keys (scenario c's loop, bench/scenarios.ts). Each returns one adapter's
 * figures at one count; the runner puts the peers and floors of the same store beside them.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { Redis } from 'ioredis'
import { Mutex as SemaphoreMutex } from 'redis-semaphore'
import { createLockClient } from '../src/index.js'
import type { Adapter, Env, Locker } from './adapter.js'
import { footprint } from './footprint.js'
import { type Figures, holdFigures, manyKeys, startWorker } from './scenarios.js'

// A collection before each heap reading, so a heap figure is what the locks keep, not garbage not yet collected.
setFlagsFromString('--expose-gc')
const collect = runInNewContext('gc') as () => void

/** A ttl short enough that s1 can wait for it to pass (the adapters' own is the bench's 30 s); GCS takes no less than 3 s. */
const s1Ttl = (store: string) => (store === 'gcs' ? 3000 : 1000)
/**
 * The most names s1 runs on a store whose every request is slow here (a JVM, an HTTP fake in this
 * process, a quorum write): per-name figures need no more, and the full count would take most of an hour.
 */
const S1_CAP: Readonly<Record<string, number>> = {
  gcs: 500,
  s3: 2000,
  dynamodb: 1000,
  zookeeper: 2000,
  mysql: 5000,
}

/** Runs `task` over `items` with at most `width` in flight. */
async function inParallel<T>(items: number, width: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = []
  let next = 0
  await Promise.all(
    Array.from({ length: Math.min(width, items) }, async () => {
      while (next < items) {
        const i = next++
        out[i] = await task(i)
      }
    }),
  )
  return out
}

/** fencelock on `adapter`'s URL with `options`, as a Locker (the adapters' own has the bench's 30 s ttl, no renewal). */
function fencelockLocker(adapter: Adapter, env: Env, ttl: number): Locker {
  const client = createLockClient(env.urls[adapter.name]!, { ttl, renew: false })
  return { acquire: (key) => client.acquire(key), close: () => client.close() }
}

/** s1 applies where the store can be counted (not the in-process memory store). */
export const s1Applies = (a: Adapter) => a.store !== 'memory'

/**
 * s1: `names` distinct names (capped on slow stores), each acquired and released once by one of 8
 * lockers; then the ttl passes, the lockers close, and the store is counted again.
 */
export async function s1(adapter: Adapter, env: Env, names: number): Promise<Figures> {
  const count = Math.min(names, S1_CAP[adapter.store] ?? names)
  const before = await footprint(adapter.store, env)
  if (!before) throw new Error(`s1 cannot count what ${adapter.store} keeps`)
  // One after the other: a floor that makes its table on first use races itself when 8 start at once.
  const lockers: Locker[] = []
  for (let i = 0; i < 8; i++)
    lockers.push(
      adapter.kind === 'fencelock'
        ? fencelockLocker(adapter, env, s1Ttl(adapter.store))
        : await adapter.createLocker(env),
    )
  const prefix = `s1-${process.pid}-${Math.random().toString(36).slice(2, 8)}-`
  const started = performance.now()
  try {
    let next = 0
    await Promise.all(
      lockers.map(async (locker) => {
        while (next < count) await (await locker.acquire(`${prefix}${next++}`)).release()
      }),
    )
  } finally {
    await Promise.all(lockers.map((l) => l.close()))
  }
  const seconds = (performance.now() - started) / 1000
  await sleep(s1Ttl(adapter.store) + 500)
  const after = (await footprint(adapter.store, env))!
  return {
    metrics: {
      names: count,
      recordsPerName: (after.records - before.records) / count,
      ...(after.bytes === undefined || before.bytes === undefined
        ? {}
        : { bytesPerName: (after.bytes - before.bytes) / count }),
      namesPerSec: count / seconds,
    },
  }
}

/** One library holding many locks with renewal on (s2). */
interface Holder {
  /** How often it renews a lock of `ttl`: what it needs to send per held lock. */
  readonly renewEveryMs: (ttl: number) => number
  acquire(key: string, ttl: number): Promise<void>
  /** Locks lost so far (the library said so, or the lock is no longer held). */
  lost(): number
  /** Renewals done so far, where the library tells them (else s2 counts the server's commands). */
  renewals?(): number
  close(): Promise<void>
}

/** s2's libraries: fencelock (renews at a third of the ttl, src/core/renewer.ts) and redis-semaphore (at 0.8 of it, its default). */
export const S2_HOLDERS: Readonly<Record<string, (env: Env) => Holder>> = {
  'fencelock redis': (env) => {
    const client = createLockClient(env.urls['fencelock redis']!, { renew: true })
    const locks: Array<{ signal: AbortSignal; release(): Promise<void> }> = []
    let renewed = 0
    const onExtend = (message: unknown) => {
      if ((message as { outcome?: string }).outcome === 'renewed') renewed++
    }
    subscribe('fencelock:extend', onExtend)
    return {
      renewEveryMs: (ttl) => ttl / 3,
      renewals: () => renewed,
      async acquire(key, ttl) {
        locks.push(await client.acquire(key, { ttl }))
      },
      lost: () => locks.filter((l) => l.signal.aborted).length,
      async close() {
        unsubscribe('fencelock:extend', onExtend)
        await inParallel(locks.length, 256, (i) => locks[i]!.release().catch(() => {}))
        await client.close()
      },
    }
  },
  'redis-semaphore Mutex': (env) => {
    const client = new Redis(env.redis, '127.0.0.1', { maxRetriesPerRequest: 1 })
    const mutexes: SemaphoreMutex[] = []
    let lost = 0
    return {
      renewEveryMs: (ttl) => Math.round(ttl * 0.8),
      async acquire(key, ttl) {
        const mutex = new SemaphoreMutex(client, key, {
          lockTimeout: ttl,
          onLockLost: () => {
            lost++
          },
        })
        await mutex.acquire()
        mutexes.push(mutex)
      },
      lost: () => Math.max(lost, mutexes.filter((m) => !m.isAcquired).length),
      async close() {
        await inParallel(mutexes.length, 256, (i) => mutexes[i]!.release().catch(() => {}))
        client.disconnect()
      },
    }
  },
}

const redisStat = async (admin: Redis, section: string, field: string) =>
  Number(new RegExp(`${field}:(\\d+)`).exec(await admin.info(section))![1])

/**
 * s2: one client acquires `held` distinct locks of `ttl` with renewal on, then holds them `holdMs` while
 * this process measures its CPU and event-loop delay and the Redis server counts the commands it gets.
 */
export async function s2(
  name: string,
  env: Env,
  held: number,
  ttl: number,
  holdMs: number,
): Promise<Figures> {
  const admin = new Redis(env.redis, '127.0.0.1')
  const holder = S2_HOLDERS[name]!(env)
  try {
    const keysBefore = await admin.dbsize()
    collect()
    const heapBefore = process.memoryUsage().heapUsed
    const prefix = `s2-${process.pid}-${Math.random().toString(36).slice(2, 8)}-`
    const acquireStarted = performance.now()
    await inParallel(held, 256, (i) => holder.acquire(`${prefix}${i}`, ttl))
    const acquireSeconds = (performance.now() - acquireStarted) / 1000
    collect()
    const heapPerLock = (process.memoryUsage().heapUsed - heapBefore) / held
    const keysPerLock = ((await admin.dbsize()) - keysBefore) / held
    const delay = monitorEventLoopDelay({ resolution: 10 })
    const commandsBefore = await redisStat(admin, 'stats', 'total_commands_processed')
    const renewalsBefore = holder.renewals?.()
    const cpu = process.cpuUsage()
    const started = performance.now()
    delay.enable()
    await sleep(holdMs)
    delay.disable()
    const seconds = (performance.now() - started) / 1000
    const used = process.cpuUsage(cpu)
    // The admin connection's own INFO is one of them.
    const commands = (await redisStat(admin, 'stats', 'total_commands_processed')) - commandsBefore - 1
    const renewalsAfter = holder.renewals?.()
    // redis-semaphore renews with one script call per lock: its renewals are the server's commands.
    const renewals =
      renewalsBefore === undefined || renewalsAfter === undefined ? commands : renewalsAfter - renewalsBefore
    const cpuUs = used.user + used.system
    const needed = held / (holder.renewEveryMs(ttl) / 1000)
    return {
      metrics: {
        lost: holder.lost(),
        renewalsPerSec: renewals / seconds,
        neededPerSec: needed,
        achievedShare: renewals / seconds / needed,
        commandsPerRenewal: renewals === 0 ? Number.NaN : commands / renewals,
        cpuUsPerRenewal: renewals === 0 ? Number.NaN : cpuUs / renewals,
        cpuShareOfCore: cpuUs / 1e6 / seconds,
        eventLoopP99Ms: delay.percentile(99) / 1e6,
        heapBytesPerLock: heapPerLock,
        serverKeysPerLock: keysPerLock,
        acquireSeconds,
      },
    }
  } finally {
    await holder.close()
    admin.disconnect()
  }
}

/** What s3 counts at the store: round trips from every process (statements, commands, gRPC messages, HTTP requests). */
interface StoreCounter {
  read(): Promise<number>
  close(): void
}

/** Requests the store received, by its own count, where s3 can read one. */
async function storeCounter(store: string, env: Env): Promise<StoreCounter | undefined> {
  if (store === 'redis') {
    const admin = new Redis(env.redis, '127.0.0.1')
    return {
      // Each reading's own INFO is counted once; differences of readings cancel it out.
      read: () => redisStat(admin, 'stats', 'total_commands_processed'),
      close: () => admin.disconnect(),
    }
  }
  if (store === 'postgres' && env.postgresStatements) {
    const count = env.postgresStatements
    return { read: async () => count(), close: () => {} }
  }
  if (store === 'etcd') {
    // Every gRPC message etcd received (a range, a txn, a watch create, a lease keep-alive), from its /metrics.
    return {
      async read() {
        const text = await (await fetch(`http://${env.etcd}/metrics`)).text()
        let sum = 0
        for (const line of text.split('\n'))
          if (line.startsWith('grpc_server_msg_received_total')) sum += Number(line.split(' ').at(-1))
        return sum
      },
      close: () => {},
    }
  }
  return undefined
}

/**
 * s3's adapters: fencelock on Redis, PostgreSQL and etcd, each store's peer with its defaults, and the
 * floors that wait (each adapter starts 4 processes: the tuned variants and the redlock peers would take
 * the run past its minutes).
 */
export const s3Applies = (a: Adapter) =>
  a.waits &&
  ['redis', 'postgres', 'etcd'].includes(a.store) &&
  (a.kind !== 'peer' ||
    /redis-semaphore Mutex \(defaults\)|etcd3 Lock \+ retry loop \(50 ms\)|advisory-lock/.test(a.name))

/**
 * s3: `waiters` waiters of one key (rounded up to a multiple of 4), a quarter in each of 4 processes (one client per process, so waiters
 * share their process's client). This process holds the key first: for `idleMs` every waiter waits (idle
 * requests per waiter-second); then it releases, and the waiters take turns for `contendedMs`, each
 * holding ~1 ms (requests per grant, handoff p50/p99).
 */
export async function s3(
  adapter: Adapter,
  env: Env,
  waiters: number,
  idleMs: number,
  contendedMs: number,
): Promise<Figures> {
  const counter = await storeCounter(adapter.store, env)
  const holder = await adapter.createLocker(env)
  const key = `s3-${process.pid}-${Math.random().toString(36).slice(2, 8)}`
  const clock = () => Number(process.hrtime.bigint()) / 1e6
  // Waiters queue up for a while under load before the idle count starts.
  const settleMs = 1500
  try {
    const held = await holder.acquire(key)
    const perProcess = Math.ceil(waiters / 4)
    const processes = Array.from({ length: 4 }, (_, id) =>
      startWorker({
        adapter: adapter.name,
        env,
        key,
        durationMs: settleMs + idleMs + contendedMs,
        workers: perProcess,
        id,
        sharedLocker: true,
      }),
    )
    const ready = await Promise.allSettled(processes.map((p) => p.ready))
    const startAt = clock() + 100
    for (const p of processes) p.go(startAt)
    const failed = ready.find((r) => r.status === 'rejected')
    if (failed) throw failed.reason
    for (const p of processes) p.done.catch(() => {})
    await sleep(startAt + settleMs - clock())
    const idleFrom = await counter?.read()
    const idleStarted = performance.now()
    await sleep(idleMs)
    const idleSeconds = (performance.now() - idleStarted) / 1000
    const idleTo = await counter?.read()
    const releasedAt = clock()
    await held.release()
    const stopAt = startAt + settleMs + idleMs + contendedMs
    await sleep(Math.max(0, stopAt - clock()))
    const contendedTo = await counter?.read()
    const outputs = await Promise.all(processes.map((p) => p.done))
    const grants = outputs.flatMap((o) => o.holds).filter(([, at]) => at >= releasedAt && at <= stopAt).length
    const figures = holdFigures(outputs, perProcess * 4, stopAt - releasedAt)
    const { minPerWorker, maxPerWorker, fairness, failures, overlaps } = figures.metrics
    return {
      metrics: {
        waiters: perProcess * 4,
        ...(idleFrom === undefined || idleTo === undefined || contendedTo === undefined
          ? {}
          : {
              requestsPerGrant: grants === 0 ? Number.NaN : (contendedTo - idleTo) / grants,
              idleRequestsPerWaiterSecond: (idleTo - idleFrom) / (perProcess * 4 * idleSeconds),
            }),
        grantsPerSec: grants / ((stopAt - releasedAt) / 1000),
        handoffP50: figures.metrics.handoffP50!,
        handoffP99: figures.metrics.handoffP99!,
        fairness: fairness!,
        minPerWorker: minPerWorker!,
        maxPerWorker: maxPerWorker!,
        failures: failures!,
        overlaps: overlaps!,
      },
      ...(figures.samples ? { samples: figures.samples } : {}),
    }
  } finally {
    counter?.close()
    await holder.close()
  }
}

/**
 * s4's adapters: fencelock on Redis, redis-semaphore, and the raw fenced floor (what a fenced grant costs
 * at least; scenario c's loop never waits long over 10,000 keys, so a floor that never waits runs it).
 */
export const s4Applies = (a: Adapter) =>
  a.store === 'redis' && !a.name.includes('redlock') && (a.kind !== 'floor' || a.fences)

/** s4: `workers` workers over 10,000 keys (scenario c with more workers). */
export const s4 = (adapter: Adapter, env: Env, workers: number, total: number, warm: number) =>
  manyKeys(adapter, env, workers, total, warm)
