/**
 * Turns bench/results/latest.json into bench/report.html: per scenario, bars of the primary figure (fencelock
 * in colour), latency distributions as CDFs, and per-worker acquisitions (fairness) for scenario b.
 * Plain SVG, no scripts, so any browser (or headless Chromium) renders it.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import type { Adapter } from './adapter.js'
import type { SCENARIOS } from './scenarios.js'

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
  readonly scenarios: Array<{
    id: string
    title: string
    primary: (typeof SCENARIOS)[number]['primary']
    rows: Row[]
  }>
}

const esc = (s: string) =>
  s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!)
const colour = (row: Row) =>
  row.kind === 'fencelock' ? '#1f6feb' : row.kind === 'floor' ? '#8b949e' : '#d29922'
const PALETTE = [
  '#1f6feb',
  '#2da44e',
  '#d29922',
  '#cf222e',
  '#8250df',
  '#bf3989',
  '#0a7d8c',
  '#6e7781',
  '#953800',
  '#57606a',
]

function bars(rows: Row[], metric: string, label: string): string {
  const shown = rows.filter((r) => Number.isFinite(r.metrics[metric]))
  if (shown.length === 0) return ''
  const max = Math.max(...shown.map((r) => r.metrics[metric]!))
  const h = 22
  const width = 760
  const labelW = 330
  const body = shown
    .map((r, i) => {
      const v = r.metrics[metric]!
      const w = max === 0 ? 0 : ((width - labelW - 90) * v) / max
      const y = i * h
      return `<text x="${labelW - 8}" y="${y + 15}" text-anchor="end">${esc(r.adapter)}</text>
<rect x="${labelW}" y="${y + 3}" width="${w.toFixed(1)}" height="${h - 6}" fill="${colour(r)}"/>
<text x="${labelW + w + 6}" y="${y + 15}">${v.toFixed(v < 10 ? 3 : 0)}</text>`
    })
    .join('\n')
  return `<h3>${esc(label)}</h3><svg width="${width}" height="${shown.length * h + 4}" font-size="12" font-family="sans-serif">${body}</svg>`
}

function cdf(rows: Row[], label: string): string {
  const shown = rows.filter((r) => r.samples && r.samples.length > 1)
  if (shown.length === 0) return ''
  const all = shown.flatMap((r) => r.samples!)
  const xmax = Math.max(...all.filter(Number.isFinite)) || 1
  // The plot on the left, its legend on the right, so labels never cover the curves.
  const width = 520
  const legend = 300
  const height = Math.max(260, 30 + shown.length * 14)
  const pad = 40
  const lines = shown
    .map((r, i) => {
      const sorted = [...r.samples!].sort((a, b) => a - b)
      const pts = sorted
        .map((v, j) => {
          const x = pad + ((width - pad - 10) * Math.log10(1 + v)) / Math.log10(1 + xmax)
          const y = height - pad - ((height - pad - 10) * (j + 1)) / sorted.length
          return `${x.toFixed(1)},${y.toFixed(1)}`
        })
        .join(' ')
      const c = PALETTE[i % PALETTE.length]
      return `<polyline fill="none" stroke="${c}" stroke-width="${r.kind === 'fencelock' ? 2.5 : 1.5}" points="${pts}"/>
<line x1="${width + 10}" x2="${width + 30}" y1="${12 + i * 14}" y2="${12 + i * 14}" stroke="${c}" stroke-width="2.5"/>
<text x="${width + 36}" y="${16 + i * 14}" fill="${c}">${esc(r.adapter)}</text>`
    })
    .join('\n')
  const ticks = [0.1, 1, 10, 100, 1000]
    .filter((t) => t <= xmax * 1.01)
    .map((t) => {
      const x = pad + ((width - pad - 10) * Math.log10(1 + t)) / Math.log10(1 + xmax)
      return `<line x1="${x}" x2="${x}" y1="${height - pad}" y2="10" stroke="#eee"/><text x="${x}" y="${height - pad + 14}" text-anchor="middle">${t} ms</text>`
    })
    .join('')
  return `<h3>${esc(label)}</h3><svg width="${width + legend}" height="${height}" font-size="11" font-family="sans-serif">
${ticks}<line x1="${pad}" x2="${width - 10}" y1="${height - pad}" y2="${height - pad}" stroke="#999"/>
<text x="${pad}" y="${height - 8}">latency (log scale) →; share of samples ↑</text>${lines}</svg>`
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
          const h = (80 * v) / max
          return `<rect x="${i * (bw + 3)}" y="${90 - h}" width="${bw}" height="${h}" fill="${colour(r)}"/>`
        })
        .join('')
      return `<figure><svg width="${r.perWorker!.length * (bw + 3)}" height="92">${bars}</svg><figcaption>${esc(r.adapter)}<br>min/max ${(r.metrics.fairness ?? 0).toFixed(2)}</figcaption></figure>`
    })
    .join('')
  return `<h3>Acquisitions per worker (each bar a worker; even bars = fair)</h3><div class="grid">${cells}</div>`
}

export function writeReport(results: Results, path: string): void {
  const sections = results.scenarios
    .map((s) => {
      const parts = [
        bars(
          s.rows,
          s.primary.metric,
          `${s.primary.label} (${s.primary.lowerIsBetter ? 'lower' : 'higher'} is better)`,
        ),
      ]
      if (s.id === 'b')
        parts.push(fairness(s.rows), cdf(s.rows, 'Handoff latency distribution (release start → next grant)'))
      if (s.id === 'h') parts.push(cdf(s.rows, 'Handoff latency distribution'))
      if (s.id === 'a' || s.id === 'd') parts.push(cdf(s.rows, 'Cycle latency distribution'))
      return `<section><h2>${esc(s.title)}</h2>${parts.join('\n')}</section>`
    })
    .join('\n')
  writeFileSync(
    path,
    `<!doctype html><html><head><meta charset="utf-8"><title>fencelock benchmarks</title>
<style>body{font-family:sans-serif;max-width:900px;margin:2em auto;color:#24292f}h2{border-top:1px solid #ddd;padding-top:1em}
.grid{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;font-size:11px;width:200px}.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}</style>
</head><body><h1>fencelock benchmarks</h1>
<p>${esc(results.date)} · ${esc(results.machine)} · ${results.runs} run(s), medians. One run, one machine: compare the bars, not the numbers.</p>
<p class="key"><span style="background:#1f6feb"></span>fencelock<span style="background:#d29922"></span>peer library<span style="background:#8b949e"></span>raw floor (no fence, no waiting)</p>
${sections}</body></html>\n`,
  )
}

// `node build/bench/report.js [results.json] [out.html]` regenerates the page from saved results.
if (process.argv[1]?.endsWith('report.js')) {
  const input = process.argv[2] ?? 'bench/results/latest.json'
  writeReport(JSON.parse(readFileSync(input, 'utf8')) as Results, process.argv[3] ?? 'bench/report.html')
}
