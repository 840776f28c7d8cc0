/**
 * Runs one chaos scenario on one store: starts the store, the protected resource, a TCP proxy per worker
 * and server (so a fault can hit one client's network), the worker processes and the nemesis; collects
 * the history (every line stamped on receipt with this process's CLOCK_MONOTONIC); checks it. Every loop
 * is bounded in count and time, traffic stays on loopback, and only processes started here are signalled.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { CapabilityError, createLockClient, type LockClient } from '../../src/index.js'
import { startProxy, type Proxy as TcpProxy } from '../support/proxy.js'
// CLOCK_MONOTONIC in ms: shared by every process of the host, never faked here.
import { monotonicMs, sleep } from '../support/time.js'
import { pollUntil } from '../support/wait.js'
import { type ChaosReport, checkHistory, LEASE_KILL, REBOOT_KILL, violationsOf } from './checker.js'
import type { HistoryEvent } from './history.js'
import { ProtectedResource, type ResourceMode } from './resource.js'
import { watchStalls } from './stalls.js'
import type { Store, Target } from './targets.js'
import type { WorkerConfig } from './worker.js'

const WORKER = fileURLToPath(new URL('./worker.js', import.meta.url))

/** libfaketime's preload library (Debian package `faketime`); a clock scenario cannot run without it. */
function libfaketime(): string {
  for (const dir of ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib']) {
    const lib = join(dir, 'faketime', 'libfaketimeMT.so.1')
    if (existsSync(lib)) return lib
  }
  throw new Error('libfaketime is not installed: apt-get install faketime (npm run test:all installs it)')
}

/** A small seeded PRNG (mulberry32): a run's faults are replayed from its seed. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

export type Rule = 'A1' | 'A2' | 'A3' | 'A4' | 'A5' | 'A7' | 'A8'

export interface Worker {
  readonly id: string
  readonly child: ChildProcess
  /** One proxy per server of the store (none for the file backend). */
  readonly proxies: readonly TcpProxy[]
  paused: boolean
  exited: boolean
}

/** What a nemesis can do; every fault is recorded as fault-start / fault-end. */
export interface NemesisContext {
  readonly rng: () => number
  readonly ttlMs: number
  readonly store: Store
  readonly key: string
  /** Ends when the run's time is up. */
  readonly signal: AbortSignal
  /** The worker that holds the lock now (by its history), if any. */
  holder(): Worker | undefined
  /** A live worker that is waiting (not holding), if any. */
  waiter(): Worker | undefined
  readonly workers: readonly Worker[]
  /** Records a fault around `during` (start, then end when it settles). */
  fault(type: string, target: string, during: () => Promise<void>): Promise<void>
  /** SIGKILLs a worker and starts a replacement under a new id. */
  replace(worker: Worker): Promise<void>
  /**
   * A host reboot: SIGKILLs every worker, runs `between` once they are all gone (no process of the old
   * boot may outlive it), then starts as many new workers. Their leases end with the kill (REBOOT_KILL).
   */
  replaceAll(between: () => Promise<void>): Promise<void>
  sleep(ms: number): Promise<void>
  /**
   * An operator breaks the key's lock (`LockClient.break`, no fence) through a client of the harness's
   * own, on the store's direct URL: recorded as a `break` event (invoke, answer, what it reports) inside an
   * `operator-break` fault.
   */
  breakLock(): Promise<void>
}

export interface Scenario {
  readonly id: string
  readonly title: string
  readonly mode: ResourceMode
  readonly workers: number
  readonly ttlMs: number
  readonly holdMs: readonly [number, number]
  /**
   * What the workers take: the lock (the default), or the leadership of an election of the same name
   * (campaign with a value, a proclaim while leading, resign). The checker's rules are the same: one
   * valid leader at a time, terms that increase, stale writes refused by term.
   */
  readonly primitive?:
    | 'election'
    | 'semaphore'
    | 'slots'
    | 'multikey'
    | 'multikey-atomic'
    | 'rwlock'
    | undefined
  /**
   * A semaphore's limit (`primitive: 'semaphore'` or `'slots'`): each worker takes one permit of it. A
   * slots semaphore's permits are checked per slot key, as locks. @default 2
   */
  readonly limit?: number | undefined
  /**
   * Workers abort half of their acquires after a random delay below this many ms: the abort lands at any
   * await point of an attempt or a wait. The checker's idle rule (A7) is then on: a grant left behind by
   * an aborted acquire would keep the waiters out for a whole ttl.
   */
  readonly abortAcquiresWithinMs?: number
  /**
   * The checker's idle rule (A7) on, with this bound in ttls: the lock may lie free while an acquire waits
   * for at most this long. A waiter left waiting on a free lock (its place in line deleted, a release that
   * never reached the line) shows as a free lock nobody gets.
   */
  readonly idleBoundTtls?: number
  /** How much longer than the store's own recovery time this scenario's faults may take to heal. */
  readonly extraRecoveryMs?: number
  /**
   * Run the first `workers` workers under libfaketime with `env` (e.g. FAKETIME="+0 x0.5": their clocks,
   * monotonic included, run at half speed) for the whole run: a client clock fault.
   */
  readonly fakeClock?: {
    readonly workers: number
    readonly env: Readonly<Record<string, string>>
    readonly label: string
    /** How fast the faked clock runs (1 = real time): a worker's "valid for N ms" is N / rate real ms. */
    readonly rate: number
  }
  /** Whether it means anything on this store (a partition needs a network). */
  applies(target: Target): boolean
  /** Violations this store is known to show here, with the reason (reported as expected, never hidden). */
  expected?(target: Target): Partial<Record<Rule, string>>
  nemesis?(ctx: NemesisContext): Promise<void>
}

export interface RunOptions {
  readonly seed: number
  readonly durationMs: number
  /** Where the history, report and picture go. */
  readonly outDir: string
}

export interface RunResult {
  readonly scenario: Scenario
  readonly target: Target
  readonly seed: number
  readonly events: HistoryEvent[]
  readonly report: ChaosReport
  readonly violations: Record<Rule, number>
  /** Violations beyond the expected ones. */
  readonly unexpected: Partial<Record<Rule, number>>
  readonly expected: Partial<Record<Rule, string>>
  readonly verdict: 'ok' | 'expected' | 'violation'
  readonly dir: string
}

export async function runScenario(
  scenario: Scenario,
  target: Target,
  options: RunOptions,
): Promise<RunResult> {
  // A store may refuse the scenario's ttl as too short to renew (GCS): its workers use its shortest.
  const ttlMs = Math.max(scenario.ttlMs, target.minTtlMs)
  const targetFeatures = target.features
  const dir = join(options.outDir, `${scenario.id}-${target.name}-${options.seed}`)
  mkdirSync(dir, { recursive: true })
  const events: HistoryEvent[] = []
  /** Clock rates of workers under a faked clock (others run at 1). */
  const rates = new Map<string, number>()
  /** Workers whose monotonic clock is faked: their own stamps mean nothing on ours. */
  const fakedMonotonic = new Set<string>()
  const record = (client: string, event: Record<string, unknown>) => {
    const { validInMs, at, ...rest } = event as {
      validInMs?: number
      at?: unknown
      ev?: unknown
      ms?: unknown
    }
    // The worker's own stamp (the host's CLOCK_MONOTONIC, as ours) where its monotonic clock is real
    // (a wall clock faked alone leaves it so): receipt stamps of two workers' lines can swap within a
    // fraction of a millisecond, as a file hand-over takes. A faked monotonic clock's stamp means nothing
    // on ours: such a worker's lines are stamped on receipt.
    const t = typeof at === 'number' && !fakedMonotonic.has(client) ? at : monotonicMs()
    const rate = rates.get(client) ?? 1
    // A deadline the worker knows only as "ms from now" (of its own clock) is placed on our clock at receipt.
    const validUntil = validInMs === undefined ? undefined : t + validInMs / rate
    // So is a stall the worker measured on its own clock.
    if (rest.ev === 'stall') rest.ms = Number(rest.ms) / rate
    const stamped = { t, client, ...rest, ...(validUntil === undefined ? {} : { validUntil }) }
    events.push(stamped as unknown as HistoryEvent)
  }
  const store = await target.start(dir)
  const resource = new ProtectedResource(scenario.mode, (e) => record('resource', e))
  await resource.start()
  const key = `chaos-${scenario.id}`
  const workers: Worker[] = []
  /** The operator's client for `breakLock`: made at its first break, closed with the run. */
  let operator: LockClient | undefined
  /** Per worker: the op it holds now (acquire-ok not yet released or lost). */
  const holding = new Map<string, string>()
  let nextId = 1

  const spawnWorker = async (): Promise<Worker> => {
    const index = nextId - 1
    const id = `w${nextId++}`
    const faked = scenario.fakeClock && index < scenario.fakeClock.workers ? scenario.fakeClock : undefined
    const proxies = await Promise.all(store.ports.map((port) => startProxy(port)))
    const config: WorkerConfig = {
      id,
      url: store.urlVia(proxies.map((p) => p.port)),
      key,
      ttlMs,
      // A multi-key acquire waits as long as the run lasts: a deadlock then shows as an acquire never
      // answered (A7's stuck waiters), not as timeouts that would break it.
      timeoutMs: scenario.primitive?.startsWith('multikey') ? options.durationMs + ttlMs * 10 : ttlMs * 5,
      holdMs: scenario.holdMs,
      ...(scenario.abortAcquiresWithinMs === undefined
        ? {}
        : { abortWithinMs: scenario.abortAcquiresWithinMs }),
      resourcePort: resource.port,
      ...(scenario.primitive === undefined ? {} : { primitive: scenario.primitive }),
      ...(scenario.primitive === 'semaphore' || scenario.primitive === 'slots'
        ? { limit: scenario.limit ?? 2 }
        : {}),
    }
    const env = faked
      ? { ...process.env, LD_PRELOAD: libfaketime(), FAKETIME_NO_CACHE: '1', ...faked.env }
      : process.env
    if (faked) {
      rates.set(id, faked.rate)
      if (faked.env.FAKETIME_DONT_FAKE_MONOTONIC !== '1') fakedMonotonic.add(id)
      record('nemesis', { ev: 'fault-start', type: 'clock', target: id, detail: faked.label })
    }
    const child = spawn(process.execPath, [WORKER, JSON.stringify(config)], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env,
    })
    const worker: Worker = { id, child, proxies, paused: false, exited: false }
    let stderr = ''
    child.stderr?.on('data', (chunk) => {
      stderr = (stderr + chunk).slice(-4000)
    })
    createInterface({ input: child.stdout! }).on('line', (line) => {
      let event: Record<string, unknown>
      try {
        event = JSON.parse(line) as Record<string, unknown>
      } catch {
        return
      }
      record(id, event)
      if (event.ev === 'acquire-ok') holding.set(id, event.op as string)
      if ((event.ev === 'release-invoke' || event.ev === 'lost') && holding.get(id) === event.op)
        holding.delete(id)
    })
    child.on('exit', (code) => {
      if (faked) record('nemesis', { ev: 'fault-end', type: 'clock', target: id })
      worker.exited = true
      holding.delete(id)
      if (code !== 0 && code !== null) writeFileSync(join(dir, `${id}.stderr`), stderr)
    })
    workers.push(worker)
    return worker
  }

  /** SIGKILLs a worker and waits for its exit; closes its proxies. */
  const kill = async (worker: Worker) => {
    if (worker.paused) worker.child.kill('SIGCONT')
    worker.paused = false
    worker.child.kill('SIGKILL')
    await new Promise<void>((resolve) =>
      worker.exited ? resolve() : worker.child.once('exit', () => resolve()),
    )
    for (const p of worker.proxies) await p.close()
  }

  for (let i = 0; i < scenario.workers; i++) await spawnWorker()
  const rng = seeded(options.seed)
  const stop = new AbortController()
  const live = () => workers.filter((w) => !w.exited)
  const ctx: NemesisContext = {
    rng,
    ttlMs,
    store,
    key,
    signal: stop.signal,
    workers,
    holder: () => live().find((w) => holding.has(w.id) && !w.paused),
    waiter: () => live().find((w) => !holding.has(w.id) && !w.paused),
    async fault(asked, target, during) {
      // Where a lease ends with its process, a killed holder's hold ends at the kill (the checker's LEASE_KILL).
      const type = asked === 'kill-holder' && targetFeatures.has('process-lease') ? LEASE_KILL : asked
      record('nemesis', { ev: 'fault-start', type, target })
      try {
        await during()
      } finally {
        record('nemesis', { ev: 'fault-end', type, target })
      }
    },
    async replace(worker) {
      await kill(worker)
      await spawnWorker()
    },
    async replaceAll(between) {
      const gone = live()
      // Each kill is a fault of its worker: the checker then asks no loss signal or answer of it, and
      // ends its lease there (a reboot ends every lease of the host).
      await Promise.all(gone.map((w) => ctx.fault(REBOOT_KILL, w.id, () => kill(w))))
      await between()
      for (let i = 0; i < gone.length; i++) await spawnWorker()
    },
    async breakLock() {
      operator ??= createLockClient(store.urlVia(store.ports), { ttl: ttlMs })
      const client = operator
      await ctx.fault('operator-break', 'store', async () => {
        const invokedAt = monotonicMs()
        try {
          const { broken, lease } = await client.break(key)
          record('nemesis', {
            ev: 'break',
            key,
            invokedAt,
            broken,
            ...(lease ? { fence: String(lease.fence), owner: lease.owner } : {}),
          })
        } catch (error) {
          record('nemesis', { ev: 'break', key, invokedAt, reason: String(error) })
          // A break the backend refuses is the scenario's error (it should not apply there), not a fault.
          if (error instanceof CapabilityError || error instanceof TypeError) throw error
        }
      })
    },
    sleep: async (ms) => {
      await sleep(Math.min(ms, Math.max(0, deadline - performance.now())))
    },
  }
  let deadline = Number.POSITIVE_INFINITY
  // While the harness could not run, the lines it then received all get late stamps: say so.
  const unwatch = watchStalls((ms) => record('harness', { ev: 'stall', ms }))
  try {
    // The run (its nemesis, its length) starts at the first grant: a store slow to serve its first
    // requests on a loaded machine (a JVM warming up) would leave a nemesis that acts on holders nothing to
    // act on. Bounded by the run's length: a store that grants nothing by then fails "no grant at all".
    await pollUntil(() => events.some((e) => e.ev === 'acquire-ok'), Boolean, {
      withinMs: options.durationMs,
      everyMs: 50,
    })
    deadline = performance.now() + options.durationMs
    const timer = setTimeout(() => stop.abort(), options.durationMs)
    const nemesis = scenario.nemesis ? scenario.nemesis(ctx).catch((error: unknown) => error) : undefined
    await sleep(options.durationMs)
    clearTimeout(timer)
    stop.abort()
    const failed = await nemesis
    if (failed instanceof Error) writeFileSync(join(dir, 'nemesis-error.txt'), `${failed.stack}`)
  } finally {
    await stopWorkers(workers, ttlMs, (id) => {
      // Killed at the end (it did not stop in time): a fault like any other, so A5 asks nothing of it.
      record('nemesis', { ev: 'fault-start', type: 'kill-at-end', target: id })
      record('nemesis', { ev: 'fault-end', type: 'kill-at-end', target: id })
    })
    await operator?.close()
    await resource.close()
    // The servers' logs go beside the history, for a replay of a failing run.
    for (const [name, log] of Object.entries(store.logs())) writeFileSync(join(dir, `${name}.log`), log)
    await store.close()
    unwatch()
  }

  const report = checkHistory(events, {
    fenced: scenario.mode === 'fenced',
    ttlMs,
    recoveryMs: store.recoveryMs + (scenario.extraRecoveryMs ?? 0),
    // Well under a ttl: only a hold nobody knows of (or a stall) keeps a waiter out that long.
    ...(scenario.abortAcquiresWithinMs === undefined ? {} : { idleBoundMs: ttlMs / 2 }),
    ...(scenario.idleBoundTtls === undefined ? {} : { idleBoundMs: ttlMs * scenario.idleBoundTtls }),
    ...(scenario.primitive === 'semaphore' ? { limit: scenario.limit ?? 2 } : {}),
    ...(scenario.primitive === 'rwlock' ? { rwlock: true } : {}),
  })
  const violations = violationsOf(report) as Record<Rule, number>
  const expected = scenario.expected?.(target) ?? {}
  const unexpected: Partial<Record<Rule, number>> = {}
  for (const [rule, count] of Object.entries(violations) as Array<[Rule, number]>) {
    if (count > 0 && expected[rule] === undefined) unexpected[rule] = count
  }
  const anyExpected = (Object.keys(expected) as Rule[]).some((rule) => violations[rule] > 0)
  const verdict = Object.keys(unexpected).length > 0 ? 'violation' : anyExpected ? 'expected' : 'ok'
  writeFileSync(join(dir, 'history.jsonl'), `${events.map((e) => JSON.stringify(e)).join('\n')}\n`)
  writeFileSync(
    join(dir, 'report.json'),
    JSON.stringify({ seed: options.seed, report, violations, expected }, null, 2),
  )
  return {
    scenario,
    target,
    seed: options.seed,
    events,
    report,
    violations,
    unexpected,
    expected,
    verdict,
    dir,
  }
}

/** Asks every worker to stop after its cycle; resumes paused ones; kills what has not exited in time. */
async function stopWorkers(
  workers: readonly Worker[],
  ttlMs: number,
  killed: (id: string) => void,
): Promise<void> {
  for (const w of workers) {
    if (w.paused) w.child.kill('SIGCONT')
    w.paused = false
    if (!w.exited) w.child.stdin?.write('stop\n')
  }
  const allExited = () => workers.every((w) => w.exited)
  await pollUntil(allExited, Boolean, { withinMs: ttlMs * 6 + 5000, everyMs: 50 })
  for (const w of workers) {
    if (w.exited) continue
    killed(w.id)
    w.child.kill('SIGKILL')
  }
  // SIGKILL cannot be ignored: they exit, the bound is only there so that a stuck kernel cannot hang us.
  await pollUntil(allExited, Boolean, { withinMs: 10_000, everyMs: 20 })
  await Promise.all(workers.flatMap((w) => w.proxies.map((p) => p.close())))
}

/** The figures of a run, for the report table. */
export function figuresOf(result: RunResult): Record<string, string | number> {
  const r = result.report
  const ms = (v: number | undefined) => (v === undefined ? '-' : Math.round(v))
  const faults = Object.entries(r.faultsByType)
    .map(([type, count]) => `${type}:${count}`)
    .join(' ')
  const expected = Object.keys(result.expected).filter((rule) => result.violations[rule as Rule] > 0)
  return {
    seed: result.seed,
    store: result.target.name,
    duration: `${Math.round(span(result.events) / 1000)}s`,
    clients: new Set(result.events.filter((e) => /^w\d+$/.test(e.client)).map((e) => e.client)).size,
    operations: r.operations,
    grants: r.grants,
    'fails (definite/maybe)': `${r.failsDefinite}/${r.failsIndeterminate}`,
    faults: faults || 'none',
    A1: `${r.a1.overlaps}${r.a1.potential ? ` (+${r.a1.potential} potential)` : ''}`,
    'A2 dup/order/regr': `${r.a2.duplicates}/${r.a2.orderViolations}/${r.a2.regressions}`,
    A3: r.a3.violations,
    A4: r.a4.violations,
    A5: r.a5.violations,
    A7: r.a7.violations,
    'A8 bad/breaks': `${r.a8.violations}/${r.a8.broken}`,
    'stale writes rejected': r.a3.staleRejected,
    'lost updates': r.fenced ? '-' : r.a3.lostUpdates,
    'I1 believed overlaps': r.i1.overlappingHolds,
    'recovery p50/p99 ms': `${ms(r.recoveryP50)}/${ms(r.recoveryP99)}`,
    'stalls (count/longest ms, A5 excused)': stallsOf(result.events, r.a5.excusedByStalls),
    'acquire p50/p99 ms': `${ms(r.acquireP50)}/${ms(r.acquireP99)}`,
    expected: expected.length > 0 ? expected.join(',') : '-',
  }
}

/** One line of figures per run: what `npm run chaos` prints. */
export function figuresLine(result: RunResult): string {
  const f = figuresOf(result)
  const body = Object.entries(f)
    .map(([k, v]) => `${k}=${v}`)
    .join(' | ')
  const verdict =
    result.verdict === 'violation'
      ? `VIOLATION ${JSON.stringify(result.unexpected)}`
      : result.verdict === 'expected'
        ? `expected violations (${Object.entries(result.expected)
            .filter(([rule]) => result.violations[rule as Rule] > 0)
            .map(([rule, why]) => `${rule} ${result.violations[rule as Rule]}: ${why}`)
            .join('; ')})`
        : 'ok'
  return `${result.scenario.id} ${result.target.name}: ${verdict} | ${body}`
}

/** Stalls of the workers and the harness (a loaded machine): how many, the longest, the holds they excused. */
function stallsOf(events: readonly HistoryEvent[], excused: number): string {
  const ms = events.flatMap((e) => (e.ev === 'stall' ? [e.ms] : []))
  return ms.length === 0 ? '0' : `${ms.length}/${Math.round(Math.max(...ms))}, ${excused}`
}

const span = (events: readonly HistoryEvent[]) =>
  events.length === 0 ? 0 : events[events.length - 1]!.t - events[0]!.t
