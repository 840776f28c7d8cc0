/**
 * Turns bench/results/latest.json into bench/report.html. The page says when, how (the command) and under
 * what load the run was made; then, per scenario, a table of every adapter measured and small multiples of
 * one store each: bars of the primary figure (coloured by kind: fencelock, peer, floor), latency CDFs and,
 * for scenario b, acquisitions per worker. Stores differ by up to six orders of magnitude (memory in µs, GCS
 * in seconds), so each panel has its own scale. A line chart draws at most MAX_SERIES lines, each in its own
 * colour from the Okabe–Ito palette (told apart with colour-blindness too); a store with more adapters gets
 * more panels, its fencelock rows repeated in each. Every chart is an `svg.chart` whose series carry
 * `data-series`, which the browser test reads. Plain SVG, no scripts: any browser renders it.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import type { Adapter } from './adapter.js'
import type { SCENARIOS } from './scenarios.js'
import { ratio } from './table.js'

export interface Row {
  readonly scenario: string
  readonly adapter: string
  readonly store: Adapter['store']
  readonly kind: Adapter['kind']
  readonly fences: boolean
  readonly note?: string
  /** Medians over runs. */
  readonly metrics: Record<string, number>
  readonly perWorker?: number[]
  readonly samples?: number[]
  readonly error?: string
}

export interface Results {
  readonly date: string
  readonly machine: string
  readonly runs: number
  /** How the run was started: the runner's arguments and the BENCH_* variables set. */
  readonly command?: string
  /** The machine's load averages (1, 5, 15 min) when the run started and ended. */
  readonly loadAverage?: { readonly start: number[]; readonly end: number[] }
  readonly scenarios: Array<{
    id: string
    title: string
    primary: (typeof SCENARIOS)[number]['primary']
    rows: Row[]
  }>
}

/** The most lines one chart draws: beyond that colours repeat or stop being told apart. */
export const MAX_SERIES = 8
/** Okabe–Ito, yellow last: it is the hardest to see on white, so it is used only by an eighth line. */
const PALETTE = ['#0072B2', '#E69F00', '#009E73', '#D55E00', '#CC79A7', '#56B4E9', '#000000', '#F0E442']
const KIND_COLOUR: Record<Row['kind'], string> = { fencelock: '#0072B2', peer: '#E69F00', floor: '#7f7f7f' }
const KIND_LABEL: Record<Row['kind'], string> = {
  fencelock: 'fencelock',
  peer: 'peer library',
  floor: 'raw floor (no fence, no waiting)',
}

const esc = (s: string) =>
  s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!)
/** Figures in ms are latencies; the others are rates named by the scenario's label. */
const isLatency = (metric: string) => /^p\d+$/.test(metric) || metric.startsWith('handoff')
const unitOf = (metric: string, label: string) => (isLatency(metric) ? 'ms' : label.replace(/^.* /, ''))
const num = (v: number) =>
  !Number.isFinite(v)
    ? 'n/a'
    : Math.abs(v) >= 100
      ? Math.round(v).toLocaleString('en')
      : v.toPrecision(3).replace(/\.?0+$/, '')

/** An adapter's name cut to fit its room in a chart; the whole name is its tooltip and in the table. */
const label = (name: string, room: number) =>
  name.length <= room ? esc(name) : `<title>${esc(name)}</title>${esc(name.slice(0, room - 1).trimEnd())}…`

/** The stores in the order the results list them (fencelock's runner groups adapters by store). */
function byStore(rows: Row[]): Array<[string, Row[]]> {
  const groups = new Map<string, Row[]>()
  for (const row of rows) groups.set(row.store, [...(groups.get(row.store) ?? []), row])
  return [...groups]
}

/** A store's rows in panels of at most MAX_SERIES, each panel holding the store's fencelock rows. */
export function panels(rows: Row[]): Row[][] {
  const own = rows.filter((r) => r.kind === 'fencelock').slice(0, MAX_SERIES - 1)
  const others = rows.filter((r) => !own.includes(r))
  if (others.length === 0) return [own]
  const room = MAX_SERIES - own.length
  const out: Row[][] = []
  for (let i = 0; i < others.length; i += room) out.push([...own, ...others.slice(i, i + room)])
  return out
}

/** 0 and two or three round steps up to at least `max`. */
function ticks(max: number): number[] {
  if (!(max > 0)) return [0, 1]
  const step0 = max / 3
  const mag = 10 ** Math.floor(Math.log10(step0))
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= step0)!
  const out = [0]
  while (out.at(-1)! < max) out.push(Number((out.at(-1)! + step).toPrecision(12)))
  return out
}

function barPanel(store: string, rows: Row[], metric: string, unit: string): string {
  const shown = rows.filter((r) => Number.isFinite(r.metrics[metric]))
  if (shown.length === 0) return ''
  const scale = ticks(Math.max(...shown.map((r) => r.metrics[metric]!)))
  const top = scale.at(-1)!
  const [labelW, plotW, rowH, axisH] = [250, 250, 20, 38]
  const x = (v: number) => labelW + (plotW * v) / top
  const body = shown
    .map((r, i) => {
      const v = r.metrics[metric]!
      const y = i * rowH
      return `<text x="${labelW - 6}" y="${y + 14}" text-anchor="end">${label(r.adapter, 40)}</text>
<rect data-series="${KIND_LABEL[r.kind]}" x="${labelW}" y="${y + 3}" width="${(x(v) - labelW).toFixed(1)}" height="${rowH - 6}" fill="${KIND_COLOUR[r.kind]}"/>
<text x="${(x(v) + 4).toFixed(1)}" y="${y + 14}">${num(v)}</text>`
    })
    .join('\n')
  const h = shown.length * rowH
  const axis = scale
    .map(
      (t) =>
        `<line x1="${x(t)}" x2="${x(t)}" y1="0" y2="${h + 4}" stroke="#ddd"/><text x="${x(t)}" y="${h + 16}" text-anchor="middle">${num(t)}</text>`,
    )
    .join('')
  return `<figure><figcaption>${esc(store)}</figcaption><svg class="chart" width="${labelW + plotW + 70}" height="${h + axisH}" font-size="11" font-family="sans-serif">
${axis}${body}<text x="${labelW + plotW / 2}" y="${h + 32}" text-anchor="middle">${esc(unit)}</text></svg></figure>`
}

function cdfPanel(title: string, rows: Row[]): string {
  const [left, plotW, plotH, bottom, legendRow] = [52, 330, 190, 40, 15]
  const all = rows.flatMap((r) => r.samples!).filter((v) => Number.isFinite(v) && v > 0)
  if (all.length === 0) return ''
  const lo = 10 ** Math.floor(Math.log10(Math.min(...all)))
  const hi = 10 ** Math.ceil(Math.log10(Math.max(...all)))
  const decades = Math.max(1, Math.round(Math.log10(hi / lo)))
  const x = (v: number) => left + (plotW * Math.log10(Math.max(v, lo) / lo)) / decades
  const y = (share: number) => 8 + plotH * (1 - share)
  const grid = [
    ...Array.from({ length: decades + 1 }, (_, i) => lo * 10 ** i).map(
      (t) =>
        `<line x1="${x(t).toFixed(1)}" x2="${x(t).toFixed(1)}" y1="${y(1)}" y2="${y(0)}" stroke="#ddd"/><text x="${x(t).toFixed(1)}" y="${y(0) + 14}" text-anchor="middle">${num(t)}</text>`,
    ),
    ...[0, 0.25, 0.5, 0.75, 1].map(
      (s) =>
        `<line x1="${left}" x2="${left + plotW}" y1="${y(s)}" y2="${y(s)}" stroke="#ddd"/><text x="${left - 4}" y="${y(s) + 4}" text-anchor="end">${s * 100}</text>`,
    ),
  ].join('')
  const lines = rows
    .map((r, i) => {
      const sorted = r.samples!.filter(Number.isFinite).sort((a, b) => a - b)
      const pts = sorted
        .map((v, j) => `${x(v).toFixed(1)},${y((j + 1) / sorted.length).toFixed(1)}`)
        .join(' ')
      const colour = PALETTE[i]!
      const dash = r.kind === 'floor' ? ' stroke-dasharray="5 3"' : ''
      const width = r.kind === 'fencelock' ? 2.5 : 1.5
      const ly = y(0) + bottom + i * legendRow
      return `<polyline data-series="${esc(r.adapter)}" fill="none" stroke="${colour}" stroke-width="${width}"${dash} points="${pts}"/>
<line data-series="${esc(r.adapter)}" x1="${left}" x2="${left + 24}" y1="${ly - 4}" y2="${ly - 4}" stroke="${colour}" stroke-width="${width}"${dash}/>
<text x="${left + 30}" y="${ly}">${label(r.adapter, 50)}</text>`
    })
    .join('\n')
  const height = y(0) + bottom + rows.length * legendRow
  return `<figure><figcaption>${esc(title)}</figcaption><svg class="chart" width="${left + plotW + 20}" height="${height}" font-size="11" font-family="sans-serif">
${grid}<text x="${left + plotW / 2}" y="${y(0) + 28}" text-anchor="middle">latency, ms (log scale)</text>
<text transform="translate(12 ${y(0.5)}) rotate(-90)" text-anchor="middle">samples ≤ latency, %</text>
${lines}</svg></figure>`
}

function cdfs(rows: Row[], label: string): string {
  const figures = byStore(rows.filter((r) => r.samples && r.samples.length > 1)).flatMap(([store, own]) => {
    const split = panels(own)
    return split.map((p, i) =>
      cdfPanel(split.length > 1 ? `${store} (${i + 1} of ${split.length})` : store, p),
    )
  })
  if (figures.length === 0) return ''
  return `<h3>${esc(label)}</h3><p class="how">One panel per store, each with its own scale; a curve further left is faster, a steeper one steadier. Dashed: raw floors.</p><div class="grid">${figures.join('\n')}</div>`
}

function fairness(rows: Row[]): string {
  const shown = rows.filter((r) => r.perWorker && r.perWorker.length > 0)
  if (shown.length === 0) return ''
  const cells = shown
    .map((r) => {
      const max = Math.max(1, ...r.perWorker!)
      const bw = 16
      const bars = r
        .perWorker!.map((v, i) => {
          const h = (60 * v) / max
          return `<rect data-series="${KIND_LABEL[r.kind]}" x="${i * (bw + 3)}" y="${62 - h}" width="${bw}" height="${h}" fill="${KIND_COLOUR[r.kind]}"/>`
        })
        .join('')
      return `<figure class="small"><svg class="chart" width="${r.perWorker!.length * (bw + 3)}" height="64">${bars}</svg><figcaption>${esc(r.adapter)}<br>${r.perWorker!.length} workers, most ${max} acquisitions; min/max ${(r.metrics.fairness ?? 0).toFixed(2)}</figcaption></figure>`
    })
    .join('')
  return `<h3>Acquisitions per worker</h3><p class="how">Each bar a worker, its height the acquisitions it made; even bars are fair.</p><div class="grid">${cells}</div>`
}

function table(s: Results['scenarios'][number], unit: string): string {
  const rows = s.rows
    .map((r) => {
      const v = r.metrics[s.primary.metric]
      const peer = ratio(r, s.rows, s.primary)
      const floor = ratio(r, s.rows, s.primary, 'floor')
      const figure = r.error ? `error: ${esc(r.error)}` : v === undefined ? '' : num(v)
      return `<tr><td>${esc(r.store)}</td><td>${esc(r.adapter)}</td><td>${KIND_LABEL[r.kind].replace(/ \(.*/, '')}</td><td>${r.fences ? 'yes' : 'no'}</td><td class="n">${figure}</td><td class="n">${peer === undefined ? '' : `${peer.toFixed(2)}×`}</td><td class="n">${floor === undefined ? '' : `${floor.toFixed(2)}×`}</td></tr>`
    })
    .join('\n')
  return `<details><summary>Every adapter measured (${s.rows.length})</summary><table><thead><tr><th>store</th><th>adapter</th><th>kind</th><th>fence</th><th>${esc(s.primary.label)}, ${esc(unit)}</th><th>fencelock ÷ best peer</th><th>fencelock ÷ floor</th></tr></thead><tbody>
${rows}</tbody></table></details>`
}

function section(s: Results['scenarios'][number]): string {
  const unit = unitOf(s.primary.metric, s.primary.label)
  const better = s.primary.lowerIsBetter ? 'lower is better' : 'higher is better'
  const bars = byStore(s.rows)
    .map(([store, rows]) => barPanel(store, rows, s.primary.metric, unit))
    .join('\n')
  const failed = s.rows
    .filter((r) => r.error)
    .map((r) => `${esc(r.adapter)} (${esc(r.store)}): ${esc(r.error!)}`)
  const parts = [
    `<h3>${esc(s.primary.label)}, ${esc(unit)} (${better})</h3><div class="grid">${bars}</div>`,
    failed.length > 0 ? `<p class="failed">No figure: ${failed.join('; ')}</p>` : '',
    table(s, unit),
  ]
  if (s.id === 'b')
    parts.push(fairness(s.rows), cdfs(s.rows, 'Handoff latency (release start → next grant), distribution'))
  if (s.id === 'h') parts.push(cdfs(s.rows, 'Handoff latency, distribution'))
  if (s.id === 'a' || s.id === 'd') parts.push(cdfs(s.rows, 'Cycle latency, distribution'))
  return `<section id="scenario-${esc(s.id)}"><h2>${esc(s.title)}</h2>${parts.join('\n')}</section>`
}

export function renderReport(results: Results): string {
  const stores = [...new Set(results.scenarios.flatMap((s) => s.rows.map((r) => r.store)))]
  const load = results.loadAverage
    ? `load average (1, 5, 15 min) ${results.loadAverage.start.map((l) => l.toFixed(1)).join(', ')} at the start, ${results.loadAverage.end.map((l) => l.toFixed(1)).join(', ')} at the end`
    : 'load not recorded'
  const key = (Object.keys(KIND_COLOUR) as Row['kind'][])
    .map((k) => `<span style="background:${KIND_COLOUR[k]}"></span>${KIND_LABEL[k]}`)
    .join('')
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>fencelock benchmarks</title>
<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#24292f}h2{border-top:1px solid #ddd;padding-top:1em}
.grid{display:flex;flex-wrap:wrap;gap:16px 28px;align-items:flex-start}figure{margin:0}figcaption{font-weight:bold;font-size:13px;margin-bottom:4px}
figure.small figcaption{font-weight:normal;font-size:11px;width:190px}.how{font-size:13px;color:#57606a}
code{background:#f6f8fa;padding:1px 4px}table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}td.n{text-align:right}
.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}</style>
</head><body><h1>fencelock benchmarks</h1>
<ul class="meta"><li>Run: ${esc(results.date)}, ${results.runs} run(s) per adapter (medians)</li>
<li>Command: <code>${esc(results.command ?? 'not recorded')}</code></li>
<li>Machine: ${esc(results.machine)}; ${load}</li>
<li>Scenarios: ${results.scenarios.map((s) => esc(s.id)).join(', ')}; stores: ${stores.map(esc).join(', ')}</li></ul>
<p>One run on one shared machine: compare bars within a panel (the same store, the same moment), not absolute numbers across runs.</p>
<p class="key">Bars:${key}</p>
${results.scenarios.map(section).join('\n')}</body></html>\n`
}

export function writeReport(results: Results, path: string): void {
  writeFileSync(path, renderReport(results))
}

// `node build/bench/report.js [results.json] [out.html]` regenerates the page from saved results.
if (process.argv[1]?.endsWith('report.js')) {
  const input = process.argv[2] ?? 'bench/results/latest.json'
  writeReport(JSON.parse(readFileSync(input, 'utf8')) as Results, process.argv[3] ?? 'bench/report.html')
}
