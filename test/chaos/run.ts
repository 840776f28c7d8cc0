/**
 * `npm run chaos [-- --only S1,S2 --targets file,redis --duration 20s --seed 7 --out chaos-results]`
 *
 * Runs every scenario on every store it applies to (bounded: each run lasts `--duration`, default 20 s),
 * prints one line of figures per run, and writes `<out>/report.html`: the figures table and, per run, an
 * SVG timeline of the holders with fault bands and rejected writes. Each run keeps its history, seed and
 * report under `<out>/<scenario>-<store>-<seed>/` for replay. Exits 1 on any unexpected violation.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { parseDuration } from '../../src/core/durations.js'
import { figuresLine, figuresOf, runScenario } from './harness.js'
import { scenarios } from './scenarios.js'
import { targets } from './targets.js'
import { renderReport, renderTimeline } from './timeline.js'

const { values } = parseArgs({
  options: {
    only: { type: 'string' },
    targets: { type: 'string', default: 'file,redis,redis-aof,etcd,etcd-3,redlock' },
    duration: { type: 'string', default: '20s' },
    seed: { type: 'string' },
    out: { type: 'string', default: 'chaos-results' },
  },
})

const only = values.only ? new Set(values.only.split(',')) : undefined
const chosen = values.targets.split(',').map((name) => {
  const target = targets[name]
  if (!target) throw new Error(`Unknown store "${name}"; known: ${Object.keys(targets).join(', ')}`)
  return target
})
const durationMs = parseDuration('--duration', values.duration)
const baseSeed = values.seed === undefined ? Date.now() % 100_000 : Number(values.seed)
const outDir = resolve(values.out)
mkdirSync(outDir, { recursive: true })

const summaries = []
let unexpected = 0
let n = 0
for (const scenario of scenarios) {
  if (only && !only.has(scenario.id)) continue
  for (const target of chosen) {
    if (!scenario.applies(target)) continue
    const seed = baseSeed + n++
    const result = await runScenario(scenario, target, { seed, durationMs, outDir })
    console.log(figuresLine(result))
    if (result.verdict === 'violation') unexpected++
    summaries.push({
      title: `${scenario.id} ${target.name}`,
      figures: figuresOf(result),
      svg: renderTimeline(result.events, {
        title: `${scenario.id} on ${target.name}: ${scenario.title} (seed ${seed})`,
      }),
      verdict: result.verdict,
    })
    writeFileSync(join(outDir, 'report.html'), renderReport(summaries, 'fencelock chaos runs'))
  }
}
console.log(
  `\n${summaries.length} runs, ${unexpected} with unexpected violations; report: ${join(outDir, 'report.html')}`,
)
process.exit(unexpected > 0 ? 1 : 0)
