/**
 * `node build/bench/rwlock-run.js [--seconds 5] [--rounds 20] [--settle 200] [--ttl 10000] [--match text] [--out dir]`:
 * fencelock's read-write lock on every store whose kit has one, beside a hand-written floor per store
 * (bench/rwlocks.ts, bench/rwlock-floors.ts: Redisson's `RReadWriteLock` rewritten on Redis, Curator's
 * recipe on ZooKeeper), with the same lease (`--ttl`) for every adapter, on the servers the bench starts
 * (bench/env.ts), in one run. The scenarios are in bench/rwlock-scenarios.ts. Prints the tables, writes
 * bench/results/rwlock-latest.json. The machine is shared: read ratios.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { arch, cpus, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { startEnv } from './env.js'
import type { Results } from './report.js'
import { measureRwLocks } from './rwlock-scenarios.js'
import { RWLOCK_ADAPTERS } from './rwlocks.js'
import { printTable } from './table.js'

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '20' },
    settle: { type: 'string', default: '200' },
    ttl: { type: 'string', default: '10000' },
    match: { type: 'string' },
    out: { type: 'string' },
  },
})
const match = values.match?.split(',')
const selected = RWLOCK_ADAPTERS.filter((a) => !match || match.some((m) => a.name.includes(m)))
if (selected.length === 0) throw new Error(`no read-write lock adapter matches ${values.match}`)

const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')
const startLoad = loadavg()
const { env, close } = await startEnv(selected)
let scenarios: Results['scenarios']
try {
  scenarios = await measureRwLocks(
    selected,
    env,
    {
      seconds: Number(values.seconds),
      rounds: Number(values.rounds),
      settleMs: Number(values.settle),
      ttlMs: Number(values.ttl),
    },
    (adapter) => process.stderr.write(`  ${adapter.name} (load ${load()})\n`),
  )
} finally {
  await close()
}

const results: Results = {
  date: new Date().toISOString(),
  machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'} (${arch()}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
  runs: 1,
  command: `rwlock-run ${process.argv.slice(2).join(' ')}`.trim(),
  loadAverage: { start: startLoad, end: loadavg() },
  scenarios,
}
// r has rows only where requests are counted: no table for a run matched to other stores.
for (const s of scenarios) if (s.rows.length > 0) printTable(s)
const out = values.out ?? fileURLToPath(new URL('../../bench/', import.meta.url))
mkdirSync(join(out, 'results'), { recursive: true })
writeFileSync(join(out, 'results', 'rwlock-latest.json'), `${JSON.stringify(results, null, 2)}\n`)
process.stderr.write(`\nwrote ${join(out, 'results', 'rwlock-latest.json')} (load ${load()})\n`)
