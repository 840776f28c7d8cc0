/**
 * `npm run bench [-- --runs N] [--only a,b] [--match text] [--out dir]`: fencelock beside the peer libraries and raw
 * floors, on real servers started by the test harness, in one run. Prints a table per scenario with a
 * `fencelock / best peer` ratio, writes bench/results/latest.json and bench/report.html.
 * Machines here are shared and noisy: read ratios from one run, never a lone absolute number.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { arch, cpus, loadavg, totalmem } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { ADAPTERS } from './adapters.js'
import { startEnv } from './env.js'
import { type Results, type Row, writeReport } from './report.js'
import { type Figures, SCENARIOS } from './scenarios.js'
import { printTable } from './table.js'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '1' },
    only: { type: 'string' },
    match: { type: 'string' },
    out: { type: 'string' },
  },
})
const runs = Math.max(1, Number(values.runs))
const only = values.only?.split(',')
/** Adapters whose name contains any of these (comma-separated). */
const match = values.match?.split(',')

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

const selected = ADAPTERS.filter((a) => !match || match.some((m) => a.name.includes(m)))
const { env, close } = await startEnv(selected)
// The machine's load when the run started and ended: the figures of a loaded machine are read as such.
const load = { start: loadavg(), end: [] as number[] }
const results: Results = {
  date: new Date().toISOString(),
  machine: `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'} (${arch()}), ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`,
  runs,
  command: [
    ...Object.entries(process.env)
      .filter(([name]) => name.startsWith('BENCH_'))
      .map(([name, value]) => `${name}=${value}`),
    'node build/bench/run.js',
    ...process.argv.slice(2).map((a) => (/^[\w,.=/-]+$/.test(a) ? a : JSON.stringify(a))),
  ].join(' '),
  loadAverage: load,
  scenarios: [],
}

try {
  for (const scenario of SCENARIOS) {
    if (only && !only.includes(scenario.id)) continue
    const adapters = selected.filter((a) => scenario.applies(a))
    const figures = new Map<string, Figures[]>()
    const errors = new Map<string, string>()
    for (let run = 0; run < runs; run++) {
      // Rotate the order each run, so drift in the machine's load does not favour whoever goes first.
      const order = adapters.map((_, i) => adapters[(i + run) % adapters.length]!)
      for (const adapter of order) {
        process.stderr.write(`  ${scenario.id} run ${run + 1}/${runs}: ${adapter.name}\n`)
        try {
          // A peer whose acquire never returns (redlock@5 under contention did) must not stall the whole
          // run: after this long the adapter's figure is an error, and the run goes on.
          let timer: NodeJS.Timeout | undefined
          const f = await Promise.race([
            scenario.run(adapter, env),
            new Promise<never>((_, reject) => {
              timer = setTimeout(() => reject(new Error('did not finish within 3 minutes')), 180_000)
            }),
          ]).finally(() => clearTimeout(timer))
          figures.set(adapter.name, [...(figures.get(adapter.name) ?? []), f])
        } catch (error) {
          errors.set(adapter.name, (error as Error).message)
        }
      }
    }
    const rows: Row[] = adapters.map((a) => {
      const fs = figures.get(a.name) ?? []
      const metrics: Record<string, number> = {}
      for (const name of Object.keys(fs[0]?.metrics ?? {}))
        metrics[name] = median(fs.map((f) => f.metrics[name]!))
      const last = fs.at(-1)
      return {
        scenario: scenario.id,
        adapter: a.name,
        store: a.store,
        kind: a.kind,
        fences: a.fences,
        ...(a.note ? { note: a.note } : {}),
        metrics,
        ...(last?.perWorker ? { perWorker: last.perWorker } : {}),
        ...(last?.samples ? { samples: last.samples } : {}),
        ...(errors.has(a.name) && fs.length === 0 ? { error: errors.get(a.name)! } : {}),
      }
    })
    results.scenarios.push({ id: scenario.id, title: scenario.title, primary: scenario.primary, rows })
    printTable(results.scenarios.at(-1)!)
  }
} finally {
  await close()
}

const out = values.out ?? fileURLToPath(new URL('../../bench/', import.meta.url))
mkdirSync(join(out, 'results'), { recursive: true })
load.end.push(...loadavg())
writeFileSync(join(out, 'results', 'latest.json'), `${JSON.stringify(results, null, 2)}\n`)
writeReport(results, join(out, 'report.html'))
process.stderr.write(`\nwrote ${join(out, 'results', 'latest.json')} and ${join(out, 'report.html')}\n`)
