/**
 * `npm run bench:scale [-- --only s1,s2,s3,s4] [--counts a,b] [--ttls ms,ms] [--hold ms] [--match text] [--out dir]`:
 * the scale scenarios of bench/scale.ts, fencelock beside the peers and floors of the same store, on the
 * servers the bench starts (bench/env.ts), in one run. One table per scenario and count, with ratios to
 * the best peer and the floor measured in the same run; writes bench/results/scale-latest.json.
 * `--counts` replaces the counts of every selected scenario: names (s1, default 10000), held locks (s2,
 * 1000,10000), waiters (s3, 10,100), workers (s4, 8,16,32,64). The machine is shared: read ratios.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { arch, cpus, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import type { Adapter } from './adapter.js'
import { ADAPTERS } from './adapters.js'
import { startEnv } from './env.js'
import type { Results, Row } from './report.js'
import { S2_HOLDERS, s1, s1Applies, s2, s3, s3Applies, s4, s4Applies } from './scale.js'
import type { Figures } from './scenarios.js'
import { printTable } from './table.js'

const { values } = parseArgs({
  options: {
    only: { type: 'string', default: 's1,s2,s3,s4' },
    counts: { type: 'string' },
    ttls: { type: 'string', default: '3000,30000' },
    hold: { type: 'string' },
    idle: { type: 'string', default: '3000' },
    contended: { type: 'string', default: '5000' },
    ops: { type: 'string', default: '20000' },
    match: { type: 'string' },
    out: { type: 'string' },
  },
})
const only = values.only.split(',')
const numbers = (text: string) => text.split(',').map(Number)
const counts = (fallback: string) => numbers(values.counts ?? fallback)
const match = values.match?.split(',')
const matched = (a: Adapter) => !match || match.some((m) => a.name.includes(m))

const S1_ADAPTERS = ADAPTERS.filter((a) => s1Applies(a) && matched(a))
const S3_ADAPTERS = ADAPTERS.filter((a) => s3Applies(a) && matched(a))
const S4_ADAPTERS = ADAPTERS.filter((a) => s4Applies(a) && matched(a))
/** s2's rows: each library of S2_HOLDERS, as a row of the Redis store. */
const s2Row = (name: string): Adapter =>
  ADAPTERS.find((a) => a.name === name) ?? { ...ADAPTERS.find((a) => a.name.startsWith(name))!, name }

const selected = [
  ...(only.includes('s1') ? S1_ADAPTERS : []),
  ...(only.includes('s2') ? ADAPTERS.filter((a) => a.name === 'fencelock redis') : []),
  ...(only.includes('s3') ? S3_ADAPTERS : []),
  ...(only.includes('s4') ? S4_ADAPTERS : []),
]
const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')
const results: Results & { load: string[] } = {
  date: new Date().toISOString(),
  machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'} (${arch()}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
  runs: 1,
  scenarios: [],
  load: [],
}
const { env, close } = await startEnv(selected)

/** Runs one table: every adapter at one count, one after the other; an adapter's failure is its row's error. */
async function table(
  id: string,
  title: string,
  primary: Results['scenarios'][number]['primary'],
  adapters: readonly Adapter[],
  run: (adapter: Adapter) => Promise<Figures>,
): Promise<void> {
  const rows: Row[] = []
  for (const adapter of adapters) {
    process.stderr.write(`  ${id}: ${adapter.name} (load ${load()})\n`)
    const base = {
      scenario: id,
      adapter: adapter.name,
      store: adapter.store,
      kind: adapter.kind,
      fences: adapter.fences,
    }
    let timer: NodeJS.Timeout | undefined
    try {
      const f = await Promise.race([
        run(adapter),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('did not finish within 10 minutes')), 600_000)
        }),
      ]).finally(() => clearTimeout(timer))
      rows.push({ ...base, metrics: f.metrics, ...(f.samples ? { samples: f.samples } : {}) })
    } catch (error) {
      rows.push({ ...base, metrics: {}, error: (error as Error).message.split('\n')[0]! })
    }
  }
  results.load.push(`${id}: ${load()}`)
  results.scenarios.push({ id, title: `${title} (load average ${load()})`, primary, rows })
  printTable(results.scenarios.at(-1)!)
}

try {
  if (only.includes('s1'))
    for (const names of counts('10000'))
      await table(
        `s1-${names}`,
        `s1 — ${names} distinct names, each acquired and released once; what stays once every ttl passed`,
        { metric: 'recordsPerName', lowerIsBetter: true, label: 'records per name' },
        S1_ADAPTERS,
        (a) => s1(a, env, names),
      )
  if (only.includes('s2'))
    for (const ttl of numbers(values.ttls))
      for (const held of counts('1000,10000'))
        await table(
          `s2-${held}-${ttl}`,
          `s2 — ${held} locks held by one client on Redis, ttl ${ttl / 1000} s, renewed`,
          { metric: 'cpuUsPerRenewal', lowerIsBetter: true, label: 'client CPU per renewal' },
          Object.keys(S2_HOLDERS).map(s2Row),
          (a) => s2(a.name, env, held, ttl, Number(values.hold ?? Math.max(10_000, 2 * ttl))),
        )
  if (only.includes('s3'))
    for (const waiters of counts('10,100'))
      await table(
        `s3-${waiters}`,
        `s3 — ${waiters} waiters on one key across 4 processes (one client each), ~1 ms holds`,
        { metric: 'requestsPerGrant', lowerIsBetter: true, label: 'requests per grant' },
        S3_ADAPTERS,
        (a) => s3(a, env, waiters, Number(values.idle), Number(values.contended)),
      )
  if (only.includes('s4'))
    for (const workers of counts('8,16,32,64'))
      await table(
        `s4-${workers}`,
        `s4 — ${workers} workers over 10,000 keys on Redis`,
        { metric: 'opsPerSec', lowerIsBetter: false, label: 'ops/s' },
        S4_ADAPTERS,
        (a) => s4(a, env, workers, Number(values.ops), Math.min(2000, Number(values.ops) / 4)),
      )
} finally {
  await close()
}

const out = values.out ?? fileURLToPath(new URL('../../bench/', import.meta.url))
mkdirSync(join(out, 'results'), { recursive: true })
writeFileSync(join(out, 'results', 'scale-latest.json'), `${JSON.stringify(results, null, 2)}\n`)
process.stderr.write(`\nwrote ${join(out, 'results', 'scale-latest.json')}\n`)
