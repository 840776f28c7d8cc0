/**
 * The benchmark scenarios. Each runs one adapter and returns its figures; the runner compares adapters.
 * Timing uses performance.now() (monotonic) in this one process, so handoff latencies are on one clock.
 */
import { spawn } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import type { Adapter, Env, Locker } from './adapter.js'
import { HTTP_STORES } from './cloud.js'
import { mysqlStatementsCounter } from './mysql.js'
import { PROCESS_SCENARIOS } from './processes.js'
import { monitorRedis } from './redis-monitor.js'
import { httpRequests } from './requests.js'
import { percentile } from './stats.js'

export interface Figures {
  readonly metrics: Record<string, number>
  /** Acquisitions per worker (fairness), where it applies. */
  readonly perWorker?: number[]
  /** Latency samples in ms (downsampled), for the report's distributions. */
  readonly samples?: number[]
}

export interface Scenario {
  readonly id: 'a' | 'c' | 'b' | 'bp' | 'h' | 'd' | 'k' | 'r'
  readonly title: string
  /** The figure the ratio column compares, and whether lower is better. */
  readonly primary: { metric: string; lowerIsBetter: boolean; label: string }
  readonly applies: (adapter: Adapter) => boolean
  run(adapter: Adapter, env: Env): Promise<Figures>
}

const n = (name: string, fallback: number) => Number(process.env[name] ?? fallback)
/**
 * The share of a scenario's cycles an adapter on this store runs: GCS takes about one write per second per
 * object, and every lock on it (fencelock's driver, the floor) keeps to that, so a cycle of one key takes
 * about two seconds; the full counts would take hours.
 */
const PACED: Readonly<Record<string, number>> = { gcs: 0.01 }
const scaled = (adapter: Adapter, count: number, least: number) =>
  Math.max(least, Math.round(count * (PACED[adapter.store] ?? 1)))
/** HTTP requests per `per`, over what `run` sent, where the store is counted that way (S3, GCS, DynamoDB). */
async function counting<T>(
  adapter: Adapter,
  run: () => Promise<T>,
): Promise<{ value: T; requests?: number }> {
  if (!HTTP_STORES.has(adapter.store)) return { value: await run() }
  const before = httpRequests()
  const value = await run()
  return { value, requests: httpRequests() - before }
}
const downsample = (samples: number[], max = 400) =>
  samples.length <= max ? samples : samples.filter((_, i) => i % Math.ceil(samples.length / max) === 0)

async function lockers(adapter: Adapter, env: Env, count: number): Promise<Locker[]> {
  return Promise.all(Array.from({ length: count }, () => adapter.createLocker(env)))
}
const closeAll = (ls: Locker[]) => Promise.all(ls.map((l) => l.close()))

async function uncontended(adapter: Adapter, env: Env, key: string): Promise<Figures> {
  const [locker] = await lockers(adapter, env, 1)
  try {
    // Long enough for the JIT to settle every adapter's hot path (200 cycles left fencelock and peers half-optimised).
    for (let i = 0, warm = scaled(adapter, 1000, 10); i < warm; i++)
      await (await locker!.acquire(key)).release()
    const cycles = scaled(adapter, n('BENCH_CYCLES', 2000), 20)
    const samples: number[] = []
    const started = performance.now()
    const { requests } = await counting(adapter, async () => {
      for (let i = 0; i < cycles; i++) {
        const t = performance.now()
        await (await locker!.acquire(key)).release()
        samples.push(performance.now() - t)
      }
    })
    const seconds = (performance.now() - started) / 1000
    return {
      metrics: {
        opsPerSec: cycles / seconds,
        p50: percentile(samples, 50),
        p99: percentile(samples, 99),
        // A cycle is one acquire and its release: the requests of both.
        ...(requests === undefined ? {} : { requestsPerAcquire: requests / cycles }),
      },
      samples: downsample(samples),
    }
  } finally {
    await closeAll([locker!])
  }
}

/**
 * The figures of processes' holds ([worker, grantedAt, releaseStartedAt] on the shared monotonic clock),
 * merged on one timeline: throughput over `durationMs`, handoff (a release to the next grant), fairness.
 */
export function holdFigures(
  outputs: Array<{ holds: Array<[number, number, number]>; failures: number }>,
  workers: number,
  durationMs: number,
): Figures {
  const holds = outputs.flatMap((o) => o.holds).sort((x, y) => x[1] - y[1])
  const perWorker = Array<number>(workers).fill(0)
  const handoffs: number[] = []
  let overlaps = 0
  let reacquisitions = 0
  for (let i = 0; i < holds.length; i++) {
    const [worker, grantedAt] = holds[i]!
    perWorker[worker]!++
    const previous = holds[i - 1]
    if (!previous) continue
    if (grantedAt < previous[2]) overlaps++
    else handoffs.push(grantedAt - previous[2])
    if (previous[0] === worker) reacquisitions++
  }
  return {
    metrics: {
      acquisitionsPerSec: holds.length / (durationMs / 1000),
      handoffP50: percentile(handoffs, 50),
      handoffP99: percentile(handoffs, 99),
      minPerWorker: Math.min(...perWorker),
      maxPerWorker: Math.max(...perWorker),
      fairness: Math.max(...perWorker) === 0 ? 0 : Math.min(...perWorker) / Math.max(...perWorker),
      reacquisitionShare: holds.length === 0 ? 0 : reacquisitions / holds.length,
      failures: outputs.reduce((a, o) => a + o.failures, 0),
      overlaps,
    },
    perWorker,
    samples: downsample(handoffs),
  }
}

/**
 * `count` workers, each a client of its own, acquire and release keys round-robin over 10,000 distinct keys
 * until `total` cycles are done (after `warm` cycles of warm-up); `cpuUsPerCycle` is this process's CPU.
 */
export async function manyKeys(
  adapter: Adapter,
  env: Env,
  count: number,
  total: number,
  warm: number,
): Promise<Figures> {
  const workers = await lockers(adapter, env, count)
  try {
    // Every worker is a fresh client: without a warm-up the figure would mostly measure connection
    // set-up and the JIT's first pass, not the steady state a long-running service sees.
    const pass = async (prefix: string, cycles: number) => {
      let next = 0
      await Promise.all(
        workers.map(async (w) => {
          while (next < cycles) {
            const key = `bench-c-${process.pid}-${prefix}${next++ % 10_000}`
            await (await w.acquire(key)).release()
          }
        }),
      )
    }
    await pass('warm-', warm)
    const cpu = process.cpuUsage()
    const started = performance.now()
    await pass('', total)
    const seconds = (performance.now() - started) / 1000
    const used = process.cpuUsage(cpu)
    return {
      metrics: { opsPerSec: total / seconds, cpuUsPerCycle: (used.user + used.system) / total },
    }
  } finally {
    await closeAll(workers)
  }
}

export const SCENARIOS: Scenario[] = [
  {
    id: 'a',
    title: 'a — uncontended: one client, acquire+release of one key',
    primary: { metric: 'p50', lowerIsBetter: true, label: 'cycle p50' },
    applies: (a) => a.store !== 'redis x5',
    run: (adapter, env) => uncontended(adapter, env, `bench-a-${process.pid}`),
  },
  {
    id: 'c',
    title: 'c — many keys: 8 workers over 10,000 distinct keys',
    primary: { metric: 'opsPerSec', lowerIsBetter: false, label: 'ops/s' },
    applies: (a) => a.store !== 'redis x5',
    run: (adapter, env) =>
      manyKeys(adapter, env, 8, n('BENCH_MANY_OPS', 20_000), n('BENCH_MANY_WARMUP', 2000)),
  },
  {
    id: 'b',
    title: 'b — contended: 8 workers, one key, ~1 ms of work while holding',
    primary: { metric: 'acquisitionsPerSec', lowerIsBetter: false, label: 'acquisitions/s' },
    applies: (a) => a.waits,
    async run(adapter, env) {
      const workers = await lockers(adapter, env, 8)
      const key = `bench-b-${process.pid}-${Math.random()}`
      const durationMs = n('BENCH_CONTENDED_MS', 5000)
      const perWorker = Array<number>(workers.length).fill(0)
      const handoffs: number[] = []
      let inside = 0
      let overlaps = 0
      let failures = 0
      let reacquisitions = 0
      let lastHolder = -1
      let lastReleaseStart = 0
      const stopAt = performance.now() + durationMs
      let requests: number | undefined
      try {
        ;({ requests } = await counting(adapter, () =>
          Promise.all(
            workers.map(async (w, i) => {
              while (performance.now() < stopAt) {
                let held: Awaited<ReturnType<Locker['acquire']>>
                try {
                  held = await w.acquire(key)
                } catch {
                  failures++
                  await sleep(1)
                  continue
                }
                const grantedAt = performance.now()
                if (lastReleaseStart > 0) handoffs.push(grantedAt - lastReleaseStart)
                if (lastHolder === i) reacquisitions++
                lastHolder = i
                if (++inside > 1) overlaps++
                perWorker[i]!++
                await sleep(1)
                inside--
                lastReleaseStart = performance.now()
                await held.release()
              }
            }),
          ),
        ))
      } finally {
        await closeAll(workers)
      }
      const total = perWorker.reduce((a, b) => a + b, 0)
      return {
        metrics: {
          acquisitionsPerSec: total / (durationMs / 1000),
          handoffP50: percentile(handoffs, 50),
          handoffP99: percentile(handoffs, 99),
          minPerWorker: Math.min(...perWorker),
          maxPerWorker: Math.max(...perWorker),
          fairness: Math.max(...perWorker) === 0 ? 0 : Math.min(...perWorker) / Math.max(...perWorker),
          reacquisitionShare: total === 0 ? 0 : reacquisitions / total,
          failures,
          overlaps,
          // Every worker's requests (the waiting ones' too), per grant.
          ...(requests === undefined ? {} : { requestsPerAcquire: total === 0 ? 0 : requests / total }),
        },
        perWorker,
        samples: downsample(handoffs),
      }
    },
  },
  {
    id: 'bp',
    title: 'bp — contended across 4 processes (2 workers each), one key, ~1 ms of work while holding',
    primary: { metric: 'acquisitionsPerSec', lowerIsBetter: false, label: 'acquisitions/s' },
    applies: (a) => a.waits && a.store !== 'memory',
    async run(adapter, env) {
      const durationMs = n('BENCH_CONTENDED_MS', 5000)
      const key = `bench-bp-${process.pid}-${Math.random().toString(36).slice(2)}`
      const processes = Array.from({ length: 4 }, (_, id) =>
        startWorker({ adapter: adapter.name, env, key, durationMs, workers: 2, id }),
      )
      // Start together once every process has loaded and connected (on a busy machine that took longer
      // than any fixed lead: late processes ran alone at the end and skewed throughput and fairness).
      const ready = await Promise.allSettled(processes.map((p) => p.ready))
      const startAt = Number(process.hrtime.bigint()) / 1e6 + 100
      for (const p of processes) p.go(startAt)
      const failed = ready.find((r) => r.status === 'rejected')
      if (failed) throw failed.reason
      const outputs = await Promise.all(processes.map((p) => p.done))
      return holdFigures(outputs, 8, durationMs)
    },
  },
  {
    id: 'h',
    title: 'h — handoff to a blocked waiter: A holds 5 ms while B waits in acquire()',
    primary: { metric: 'p50', lowerIsBetter: true, label: 'handoff p50' },
    applies: (a) => a.waits && a.store !== 'redis x5',
    async run(adapter, env) {
      const pair = await lockers(adapter, env, 2)
      const key = `bench-h-${process.pid}-${Math.random()}`
      const count = scaled(adapter, n('BENCH_HANDOFFS', 300), 10)
      const warm = scaled(adapter, 20, 3)
      const latencies: number[] = []
      try {
        let held = await pair[0]!.acquire(key)
        for (let i = 0; i < (adapter.handoffAfterLease ? 0 : count + warm); i++) {
          let grantedAt = 0
          const waiting = pair[(i + 1) % 2]!.acquire(key).then((h) => {
            grantedAt = performance.now()
            return h
          })
          // A library that refuses at once instead of waiting fails the scenario below, not the process.
          waiting.catch(() => {})
          await sleep(5)
          const releaseStart = performance.now()
          await held.release()
          held = await waiting
          if (i >= warm) latencies.push(grantedAt - releaseStart)
        }
        await held.release()
        const waitingCommands =
          adapter.store === 'redis'
            ? await whileBlocked(pair, `${key}:blocked`, redisCommands(env))
            : undefined
        const waitingStatements =
          adapter.store === 'mysql'
            ? await whileBlocked(pair, `${key}:blocked`, () => mysqlStatementsCounter(env))
            : adapter.store === 'postgres'
              ? await whileBlocked(pair, `${key}:blocked`, pgStatements(env))
              : undefined
        const waitingRequests = HTTP_STORES.has(adapter.store)
          ? await whileBlocked(pair, `${key}:blocked`, requestCounter())
          : undefined
        return {
          metrics: {
            ...(latencies.length === 0
              ? {}
              : { p50: percentile(latencies, 50), p99: percentile(latencies, 99) }),
            ...(waitingCommands === undefined ? {} : { commandsPerWaitingSecond: waitingCommands }),
            ...(waitingStatements === undefined ? {} : { statementsPerWaitingSecond: waitingStatements }),
            ...(waitingRequests === undefined ? {} : { requestsPerWaitingSecond: waitingRequests }),
          },
          samples: downsample(latencies),
        }
      } finally {
        await closeAll(pair)
      }
    },
  },
  {
    id: 'd',
    title: 'd — Redlock over 5 nodes: uncontended acquire+release',
    primary: { metric: 'p50', lowerIsBetter: true, label: 'cycle p50' },
    applies: (a) => a.store === 'redis x5',
    run: (adapter, env) => uncontended(adapter, env, `bench-d-${process.pid}`),
  },
  ...PROCESS_SCENARIOS,
]

/** Counts what a blocked waiter sends, from `reset()` on. */
interface Counter {
  reset(): void | Promise<void>
  count(): number | Promise<number>
  close(): void
}

/**
 * Commands at the Redis server, with MONITOR: commands a script runs inside Redis are reported with source
 * "lua" and are not counted (they are not round trips).
 */
async function redisCommandsCounter(env: Env): Promise<Counter> {
  let count = 0
  const monitor = await monitorRedis(env.redis, (command, source) => {
    if (source !== 'lua' && command !== 'monitor') count++
  })
  return {
    reset: () => {
      count = 0
    },
    count: () => count,
    close: () => monitor.close(),
  }
}
const redisCommands = (env: Env) => () => redisCommandsCounter(env)

/** Statements sent to PostgreSQL, counted by the proxy every postgres adapter goes through (run.ts). */
const pgStatements = (env: Env) => async (): Promise<Counter> => {
  const counter = env.postgresStatements
  if (!counter) throw new Error('no statement counter for postgres')
  let from = counter()
  return {
    reset: () => {
      from = counter()
    },
    count: () => counter() - from,
    close: () => {},
  }
}

/** HTTP requests this process sends (S3, GCS, DynamoDB; bench/requests.ts). */
const requestCounter = () => async (): Promise<Counter> => {
  let from = httpRequests()
  return {
    reset: () => {
      from = httpRequests()
    },
    count: () => httpRequests() - from,
    close: () => {},
  }
}

/** What a blocked waiter sends per second, while another locker holds `key` (no renewals: the bench's ttl is 30 s). */
async function whileBlocked(pair: Locker[], key: string, start: () => Promise<Counter>): Promise<number> {
  const counter = await start()
  const blocker = await pair[1]!.acquire(key)
  const blocked = pair[0]!.acquire(key)
  // Libraries that stop retrying (redlock's defaults give up after ~2 s) reject here; the count stands.
  blocked.catch(() => {})
  await sleep(300)
  await counter.reset()
  const from = performance.now()
  await sleep(3000)
  const perSecond = (await counter.count()) / ((performance.now() - from) / 1000)
  await blocker.release()
  await blocked.then(
    (held) => held.release(),
    () => {},
  )
  counter.close()
  return perSecond
}

const WORKER = fileURLToPath(new URL('./worker.js', import.meta.url))

/** One bp process: `ready` once its lockers are connected, `go(startAt)` starts it, `done` has its holds. */
interface WorkerProcess {
  readonly ready: Promise<void>
  go(startAt: number): void
  readonly done: Promise<{ holds: Array<[number, number, number]>; failures: number }>
}

/**
 * Starts one bp process (also the scale runner's s3); it says `ready` on its first line, and waits for the
 * start instant on stdin. With `sharedLocker`, its workers share one locker (one client with many waiters).
 */
export function startWorker(job: {
  adapter: string
  env: Env
  key: string
  durationMs: number
  workers: number
  id: number
  sharedLocker?: boolean
}): WorkerProcess {
  const child = spawn(process.execPath, [WORKER, JSON.stringify(job)], { stdio: 'pipe' })
  let stdout = ''
  let stderr = ''
  let signalReady: () => void = () => {}
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve))
  const ready = new Promise<void>((resolve, reject) => {
    signalReady = resolve
    exited.then((code) =>
      reject(new Error(`bp worker ${job.id} exited (${code}) before it was ready: ${stderr}`)),
    )
  })
  ready.catch(() => {})
  child.stdout.on('data', (chunk) => {
    stdout += chunk
    if (stdout.startsWith('ready\n')) signalReady()
  })
  child.stderr.on('data', (chunk) => {
    stderr += chunk
  })
  // A worker that died before its start instant closed its stdin: `done` reports it, not an EPIPE.
  child.stdin.on('error', () => {})
  return {
    ready,
    go: (startAt) => child.stdin.end(`${startAt}\n`),
    done: exited.then((code) => {
      if (code !== 0) throw new Error(`bp worker ${job.id} exited (${code}): ${stderr}`)
      return JSON.parse(stdout.slice('ready\n'.length))
    }),
  }
}
