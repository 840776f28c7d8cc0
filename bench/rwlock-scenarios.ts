/**
 * The read-write lock bench's scenarios, run by rwlock-run.ts and, tiny, by its smoke test. Each runs on a
 * lock of its own, and every grant is checked against the read-write rule as this process sees it (all
 * contenders are here): a grant while a writer holds, or a writer's grant while anyone holds, fails the row.
 * - t, read throughput: 8 readers each looping read → hold one event-loop turn → release; grants/s.
 * - h, handoff: two readers hold and a writer waits, then the readers release: ms from the last reader's
 *   release to the writer's grant; then the writer holds and two readers wait, and it releases: ms to the
 *   later reader's grant. A waiter granted before the release fails the row.
 * - m, mixed: 8 workers, each op a read but every tenth a write, held one turn: grants/s, and how long the
 *   writers waited, the longest included: a lock that lets readers pass a waiting writer shows it here.
 * - r, requests per grant in t and in m, where the bench can count them (bench/store-requests.ts).
 */
import { setImmediate, setTimeout as sleep } from 'node:timers/promises'
import type { Env } from './adapter.js'
import type { Results, Row } from './report.js'
import type { RwContender, RwHeld, RwLockAdapter, RwMode } from './rwlocks.js'
import { percentile } from './stats.js'
import { type Counting, counting } from './store-requests.js'

export interface RwBenchOptions {
  /** How long t and m run. */
  readonly seconds: number
  /** Rounds of h. */
  readonly rounds: number
  /** How long h lets a waiter wait before the release (nothing tells when a peer's acquire waits). */
  readonly settleMs: number
  /** Every contender's lease. */
  readonly ttlMs: number
}

const WORKERS = 8
/** In m, one op in this many is a write. */
const WRITE_EVERY = 10
const clock = () => performance.now()
let locks = 0
/** A lock name of its own for each measurement, so that no run sees another's holders. */
const fresh = (what: string) => `bench-rw-${process.pid}-${what}-${locks++}`

/** The holders of the bench's locks as this process sees its grants, and the grants that broke the rule. */
class RuleCheck {
  readonly #readers = new Map<string, number>()
  readonly #writers = new Map<string, number>()
  broken = 0

  granted(name: string, mode: RwMode): void {
    const readers = this.#readers.get(name) ?? 0
    const writers = this.#writers.get(name) ?? 0
    if (writers > 0 || (mode === 'write' && readers > 0)) this.broken++
    if (mode === 'read') this.#readers.set(name, readers + 1)
    else this.#writers.set(name, writers + 1)
  }

  leaving(name: string, mode: RwMode): void {
    const holders = mode === 'read' ? this.#readers : this.#writers
    holders.set(name, holders.get(name)! - 1)
  }
}

/** A contender whose grants the check sees; a holder is out before its release starts. */
function checked(contender: RwContender, rule: RuleCheck): RwContender {
  return {
    async acquire(name, mode) {
      const held = await contender.acquire(name, mode)
      rule.granted(name, mode)
      return {
        release: () => {
          rule.leaving(name, mode)
          return held.release()
        },
      }
    },
    close: () => contender.close(),
  }
}

/**
 * Runs `use` with `count` contenders of the adapter, each its own client, closed whatever `use` does; fails
 * when a grant broke the read-write rule.
 */
async function withContenders<T>(
  adapter: RwLockAdapter,
  env: Env,
  options: RwBenchOptions,
  count: number,
  use: (contenders: RwContender[]) => Promise<T>,
): Promise<T> {
  const rule = new RuleCheck()
  const contenders: RwContender[] = []
  let result: T
  try {
    for (let i = 0; i < count; i++)
      contenders.push(checked(await adapter.contender(env, options.ttlMs), rule))
    result = await use(contenders)
  } finally {
    await Promise.all(contenders.map((c) => c.close()))
  }
  if (rule.broken > 0)
    throw new Error(`${adapter.name}: ${rule.broken} grant(s) put a writer beside another holder`)
  return result
}

/** What `body` sent to the store, where `counter` counts it, and the seconds it took. */
async function timed(counter: Counting | undefined, body: () => Promise<void>) {
  await counter?.begin()
  const start = clock()
  await body()
  const seconds = (clock() - start) / 1000
  return { seconds, counts: await counter?.stop() }
}

/** The requests (and commands) per grant of a counted run, under `what`'s names. */
function perGrant(what: string, counts: { requests: number; commands?: number } | undefined, grants: number) {
  if (counts === undefined) return {}
  return {
    [`requestsPer${what}Grant`]: counts.requests / grants,
    ...(counts.commands === undefined ? {} : { [`commandsPer${what}Grant`]: counts.commands / grants }),
  }
}

/** Holds for one turn of the event loop, so that the other contenders' grants can land meanwhile. */
async function holdOneTurn(held: RwHeld): Promise<void> {
  await setImmediate()
  await held.release()
}

type Measured = { metrics: Record<string, number>; requests?: Record<string, number> }

/**
 * 8 workers looping acquire (in the mode `modeOf` picks for a worker's i-th op) → hold one turn → release
 * for `options.seconds`, each finishing the op it began: the grants, the ms each writer waited from asking,
 * the seconds taken, and what the store was sent, where `counter` counts it.
 */
async function looping(
  adapter: RwLockAdapter,
  env: Env,
  options: RwBenchOptions,
  counter: Counting | undefined,
  modeOf: (op: number, worker: number) => RwMode,
) {
  const name = fresh('loop')
  return withContenders(adapter, env, options, WORKERS, async (workers) => {
    let granted = 0
    const writerWaits: number[] = []
    const end = clock() + options.seconds * 1000
    const { seconds, counts } = await timed(counter, async () => {
      await Promise.all(
        workers.map(async (worker, w) => {
          for (let i = 0; clock() < end; i++) {
            const mode = modeOf(i, w)
            const asked = clock()
            const held = await worker.acquire(name, mode)
            if (mode === 'write') writerWaits.push(clock() - asked)
            granted++
            await holdOneTurn(held)
          }
        }),
      )
    })
    return { granted, writerWaits, seconds, counts }
  })
}

async function readThroughput(
  adapter: RwLockAdapter,
  env: Env,
  options: RwBenchOptions,
  counter: Counting | undefined,
): Promise<Measured> {
  const { granted, seconds, counts } = await looping(adapter, env, options, counter, () => 'read')
  return { metrics: { readsPerSec: granted / seconds }, requests: perGrant('Read', counts, granted) }
}

/**
 * Lets the `waiting` acquires wait while the holders hold, failing when one is granted meanwhile, then runs
 * `release`: the grants, and ms from the release's start to the last of them.
 */
async function grantedAfterRelease(
  adapter: RwLockAdapter,
  waiting: Array<Promise<{ held: RwHeld; at: number }>>,
  settleMs: number,
  release: () => Promise<void>,
): Promise<{ held: RwHeld[]; ms: number }> {
  const early = await Promise.race([
    Promise.any(waiting).then(
      () => true,
      () => false,
    ),
    sleep(settleMs, false),
  ])
  if (early) throw new Error(`${adapter.name}: a waiter was granted while the holders held`)
  const releasedAt = clock()
  await release()
  const granted = await Promise.all(waiting)
  return { held: granted.map((g) => g.held), ms: Math.max(...granted.map((g) => g.at)) - releasedAt }
}

async function handoff(adapter: RwLockAdapter, env: Env, options: RwBenchOptions): Promise<Measured> {
  return withContenders(adapter, env, options, 3, async ([a, b, c]) => {
    const asking = (contender: RwContender, name: string, mode: RwMode) => {
      const acquiring = contender.acquire(name, mode).then((held) => ({ held, at: clock() }))
      acquiring.catch(() => {})
      return acquiring
    }
    const write: number[] = []
    const read: number[] = []
    for (let i = 0; i < options.rounds; i++) {
      const name = fresh('h')
      const readers = [await a!.acquire(name, 'read'), await b!.acquire(name, 'read')]
      const writer = await grantedAfterRelease(
        adapter,
        [asking(c!, name, 'write')],
        options.settleMs,
        async () => {
          await readers[0]!.release()
          await readers[1]!.release()
        },
      )
      write.push(writer.ms)
      const next = await grantedAfterRelease(
        adapter,
        [asking(a!, name, 'read'), asking(b!, name, 'read')],
        options.settleMs,
        () => writer.held[0]!.release(),
      )
      read.push(next.ms)
      await Promise.all(next.held.map((h) => h.release()))
    }
    return {
      metrics: {
        writeHandoffP50: percentile(write, 50),
        writeHandoffP99: percentile(write, 99),
        readHandoffP50: percentile(read, 50),
        readHandoffP99: percentile(read, 99),
      },
    }
  })
}

async function mixed(
  adapter: RwLockAdapter,
  env: Env,
  options: RwBenchOptions,
  counter: Counting | undefined,
): Promise<Measured> {
  // Each worker's writes are a tenth of its ops, the workers' staggered.
  const { granted, writerWaits, seconds, counts } = await looping(adapter, env, options, counter, (i, w) =>
    (i + w) % WRITE_EVERY === 0 ? 'write' : 'read',
  )
  return {
    metrics: {
      grantsPerSec: granted / seconds,
      writesPerSec: writerWaits.length / seconds,
      writerWaitP50: percentile(writerWaits, 50),
      writerWaitMax: Math.max(...writerWaits),
    },
    requests: perGrant('Mixed', counts, granted),
  }
}

/** Every scenario on every adapter, in order; `onAdapter` hears each adapter as it starts. */
export async function measureRwLocks(
  adapters: readonly RwLockAdapter[],
  env: Env,
  options: RwBenchOptions,
  onAdapter: (adapter: RwLockAdapter) => void = () => {},
): Promise<Results['scenarios']> {
  const rows: Record<'t' | 'h' | 'm' | 'r', Row[]> = { t: [], h: [], m: [], r: [] }
  for (const adapter of adapters) {
    onAdapter(adapter)
    const base = {
      adapter: adapter.name,
      store: adapter.store,
      kind: adapter.kind,
      fences: adapter.kind === 'fencelock',
      ...(adapter.note ? { note: adapter.note } : {}),
    }
    const counter = await counting(adapter.store, env)?.()
    const requests: Record<string, number> = {}
    try {
      const measures = {
        t: () => readThroughput(adapter, env, options, counter),
        h: () => handoff(adapter, env, options),
        m: () => mixed(adapter, env, options, counter),
      }
      for (const id of ['t', 'h', 'm'] as const) {
        try {
          const measured = await measures[id]()
          Object.assign(requests, measured.requests)
          rows[id].push({ ...base, scenario: id, metrics: measured.metrics })
        } catch (error) {
          rows[id].push({
            ...base,
            scenario: id,
            metrics: {},
            error: (error as Error).message.split('\n')[0]!,
          })
        }
      }
    } finally {
      counter?.close()
    }
    if (Object.keys(requests).length > 0) rows.r.push({ ...base, scenario: 'r', metrics: requests })
  }
  const s = options.seconds
  return [
    {
      id: 't',
      title: `t — read throughput: ${WORKERS} readers looping read → release for ${s} s, grants/s (ttl ${options.ttlMs} ms)`,
      primary: { metric: 'readsPerSec', lowerIsBetter: false, label: 'reads/s' },
      rows: rows.t,
    },
    {
      id: 'h',
      title: `h — handoff: the last reader's release → the waiting writer granted, and the writer's release → both waiting readers granted, ms over ${options.rounds} rounds`,
      primary: { metric: 'writeHandoffP50', lowerIsBetter: true, label: 'write handoff p50' },
      rows: rows.h,
    },
    {
      id: 'm',
      title: `m — mixed: ${WORKERS} workers, one op in ${WRITE_EVERY} a write, for ${s} s: grants/s and the writers' wait in ms`,
      primary: { metric: 'writerWaitMax', lowerIsBetter: true, label: 'longest writer wait' },
      rows: rows.m,
    },
    {
      id: 'r',
      title: 'r — requests (and commands run) sent to the store per grant, in t (Read) and m (Mixed)',
      primary: { metric: 'requestsPerMixedGrant', lowerIsBetter: true, label: 'requests per mixed grant' },
      rows: rows.r,
    },
  ]
}
