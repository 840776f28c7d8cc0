/**
 * `node build/bench/semaphore-run.js [--seconds 5] [--rounds 20] [--wait 3] [--ttl 10000] [--match text] [--out dir]`:
 * fencelock's counting semaphore on every store that has one and its slots layout on every store, beside
 * redis-semaphore's `Semaphore` and `RedlockSemaphore` and a hand-written floor per store family
 * (bench/semaphores.ts, bench/semaphore-floors.ts, bench/semaphore-slots.ts), with the same lease
 * length (`--ttl`) for every adapter, on the servers the bench starts (bench/env.ts), in one run. Three
 * scenarios per adapter, each on a semaphore of its own:
 * - t, throughput: limit 4, 8 contenders each looping acquire → release for `--seconds`; permits per second,
 *   and the overlaps seen (grants beyond the limit: 0 for a correct semaphore).
 * - h, handoff: limit 1, one holder and one waiter; after a pause (time for the waiter to be waiting: nothing
 *   tells when a peer's acquire waits) the holder releases; ms from the release's start to the grant, over
 *   `--rounds` rounds.
 * - r, requests while waiting: limit 4 held by 4, 8 waiters wait `--wait` seconds; on Redis (Redlock: its five servers summed) and PostgreSQL,
 *   where the bench can count them, the requests the store is sent per waiter per second, the holders'
 *   renewals included (Redis: MONITOR, and the commands it runs, scripts' inside included, from
 *   `INFO commandstats`; PostgreSQL: statements at the bench's proxy); on every store, a waiter granted
 *   while the 4 hold is an error in the row.
 * Prints the tables, writes bench/results/semaphore-latest.json. The machine is shared: read ratios.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { arch, cpus, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import { setImmediate, setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { Env } from './adapter.js'
import { startEnv } from './env.js'
import type { Results, Row } from './report.js'
import { type Contender, type Permit, SEMAPHORE_ADAPTERS, type SemaphoreAdapter } from './semaphores.js'
import { percentile } from './stats.js'
import { type Counting, counting } from './store-requests.js'
import { printTable } from './table.js'

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '20' },
    wait: { type: 'string', default: '3' },
    settle: { type: 'string', default: '200' },
    ttl: { type: 'string', default: '10000' },
    match: { type: 'string' },
    out: { type: 'string' },
  },
})
const seconds = Number(values.seconds)
const rounds = Number(values.rounds)
const waitSeconds = Number(values.wait)
const settleMs = Number(values.settle)
const ttlMs = Number(values.ttl)
const match = values.match?.split(',')
const selected = SEMAPHORE_ADAPTERS.filter((a) => !match || match.some((m) => a.name.includes(m)))
if (selected.length === 0) throw new Error(`no semaphore adapter matches ${values.match}`)

const LIMIT = 4
const CONTENDERS = 8
const clock = () => performance.now()
const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')
let semaphores = 0
/** A semaphore name of its own for each measurement, so that no run sees another's permits. */
const fresh = (what: string) => `bench-sem-${process.pid}-${what}-${semaphores++}`

/** Contenders of one adapter, each its own client; closed whatever `use` does. */
async function withContenders<T>(
  adapter: SemaphoreAdapter,
  env: Env,
  count: number,
  use: (contenders: Contender[]) => Promise<T>,
): Promise<T> {
  const contenders: Contender[] = []
  try {
    for (let i = 0; i < count; i++) contenders.push(await adapter.contender(env, ttlMs))
    return await use(contenders)
  } finally {
    await Promise.all(contenders.map((c) => c.close()))
  }
}

/**
 * t: permits granted per second with limit 4 and 8 contenders looping acquire → hold one event-loop turn →
 * release; `overlaps` counts the grants seen while `limit` permits were already between their grant and
 * their release (all contenders are in this process), which a correct semaphore never makes.
 */
async function throughput(adapter: SemaphoreAdapter, env: Env): Promise<Record<string, number>> {
  const name = fresh('t')
  return withContenders(adapter, env, CONTENDERS, async (contenders) => {
    let granted = 0
    let inside = 0
    let overlaps = 0
    const start = clock()
    const end = start + seconds * 1000
    await Promise.all(
      contenders.map(async (c) => {
        while (clock() < end) {
          const permit = await c.acquire(name, LIMIT)
          granted++
          if (++inside > LIMIT) overlaps++
          // Held for one turn of the event loop, so that the other contenders' grants can land meanwhile;
          // out before the release starts: a grant the release makes possible is not an overlap.
          await setImmediate()
          inside--
          await permit.release()
        }
      }),
    )
    return { permitsPerSec: granted / ((clock() - start) / 1000), overlaps }
  })
}

/** h: ms from a holder's release to the waiter's grant, limit 1. */
async function handoff(adapter: SemaphoreAdapter, env: Env): Promise<Record<string, number>> {
  return withContenders(adapter, env, 2, async ([holder, waiter]) => {
    const samples: number[] = []
    for (let i = 0; i < rounds; i++) {
      const name = fresh('h')
      const held = await holder!.acquire(name, 1)
      let grantedAt: number | undefined
      const waiting = waiter!.acquire(name, 1).then((permit) => {
        grantedAt = clock()
        return permit
      })
      waiting.catch(() => {})
      await sleep(settleMs)
      if (grantedAt !== undefined)
        throw new Error(`${adapter.name}: the waiter was granted while the holder held`)
      const releasedAt = clock()
      await held.release()
      const permit = await waiting
      samples.push(grantedAt! - releasedAt)
      await permit.release()
    }
    return { handoffP50: percentile(samples, 50), handoffP99: percentile(samples, 99) }
  })
}

/**
 * r: the store's requests (and commands) per waiter per second while 8 waiters wait on a full limit 4, where
 * the bench can count them; on every store, a waiter granted while the 4 hold fails the row (the check of
 * the limit that does not depend on timing: scenario t's overlaps see only grants that land at once).
 */
async function requests(adapter: SemaphoreAdapter, env: Env): Promise<Record<string, number>> {
  const start = counting(adapter.store, env)
  const name = fresh('r')
  let counted: Counting | undefined
  try {
    return await withContenders(adapter, env, LIMIT + CONTENDERS, async (contenders) => {
      counted = await start?.()
      const holders = contenders.slice(0, LIMIT)
      const held: Permit[] = []
      for (const h of holders) held.push(await h.acquire(name, LIMIT))
      let full = true
      let grantedWhileFull = 0
      const waits = contenders.slice(LIMIT).map((w) =>
        w.acquire(name, LIMIT).then((permit) => {
          if (full) grantedWhileFull++
          return permit
        }),
      )
      for (const w of waits) w.catch(() => {})
      await sleep(settleMs)
      await counted?.begin()
      const began = clock()
      await sleep(waitSeconds * 1000)
      const counts = await counted?.stop()
      const elapsed = (clock() - began) / 1000
      // Let every waiter in and out, so that the clients close with nothing pending.
      full = false
      for (const h of held) await h.release()
      await Promise.all(waits.map(async (w) => (await w).release()))
      if (grantedWhileFull > 0)
        throw new Error(`${adapter.name}: ${grantedWhileFull} waiter(s) granted while the limit was held`)
      if (counts === undefined) return {}
      const perWaiterSecond = (n: number) => n / CONTENDERS / elapsed
      return {
        requestsPerWaitingSec: perWaiterSecond(counts.requests),
        ...(counts.commands === undefined ? {} : { commandsPerWaitingSec: perWaiterSecond(counts.commands) }),
      }
    })
  } finally {
    counted?.close()
  }
}

const startLoad = loadavg()
const { env, close } = await startEnv(selected)
const rows: Record<'t' | 'h' | 'r', Row[]> = { t: [], h: [], r: [] }
const measures = { t: throughput, h: handoff, r: requests }
try {
  for (const adapter of selected) {
    process.stderr.write(`  ${adapter.name} (load ${load()})\n`)
    const base = {
      adapter: adapter.name,
      store: adapter.store,
      kind: adapter.kind,
      fences: false,
      ...(adapter.note ? { note: adapter.note } : {}),
    }
    for (const id of ['t', 'h', 'r'] as const) {
      try {
        const metrics = await measures[id](adapter, env)
        if (Object.keys(metrics).length > 0) rows[id].push({ ...base, scenario: id, metrics })
      } catch (error) {
        rows[id].push({ ...base, scenario: id, metrics: {}, error: (error as Error).message.split('\n')[0]! })
      }
    }
  }
} finally {
  await close()
}

const scenarios: Results['scenarios'] = [
  {
    id: 't',
    title: `t — throughput: limit ${LIMIT}, ${CONTENDERS} contenders looping acquire → release for ${seconds} s, permits/s (ttl ${ttlMs} ms; load average ${load()})`,
    primary: { metric: 'permitsPerSec', lowerIsBetter: false, label: 'permits/s' },
    rows: rows.t,
  },
  {
    id: 'h',
    title: `h — handoff: limit 1, release → the waiting acquire granted, ms over ${rounds} rounds`,
    primary: { metric: 'handoffP50', lowerIsBetter: true, label: 'handoff p50' },
    rows: rows.h,
  },
  {
    id: 'r',
    title: `r — requests to the store per waiter per second: limit ${LIMIT} held, ${CONTENDERS} waiters for ${waitSeconds} s (holders’ renewals included)`,
    primary: { metric: 'requestsPerWaitingSec', lowerIsBetter: true, label: 'requests per waiting second' },
    rows: rows.r,
  },
]
const results: Results = {
  date: new Date().toISOString(),
  machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'} (${arch()}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
  runs: 1,
  command: `semaphore-run ${process.argv.slice(2).join(' ')}`.trim(),
  loadAverage: { start: startLoad, end: loadavg() },
  scenarios,
}
for (const s of scenarios) printTable(s)
const out = values.out ?? fileURLToPath(new URL('../../bench/', import.meta.url))
mkdirSync(join(out, 'results'), { recursive: true })
writeFileSync(join(out, 'results', 'semaphore-latest.json'), `${JSON.stringify(results, null, 2)}\n`)
process.stderr.write(`\nwrote ${join(out, 'results', 'semaphore-latest.json')}\n`)
