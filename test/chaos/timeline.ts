/**
 * Pictures of chaos runs, for a human reading the report: `renderTimeline` draws one run's history as an
 * SVG (a lane per worker, a bar per hold, a band per fault, marks for writes and losses), `renderReport`
 * puts every run's figures and timeline on one self-contained HTML page. Pure string building: no DOM, no
 * dependencies, so a report can be written from the harness or from a saved history.
 *
 * A hold's bar is solid while the library's `validUntil` (the latest a renewal reported) covers it, and
 * hatched after that, until the holder released or heard that the lock was lost: the hatched part is a
 * holder acting on a stale belief, which is what a pause or a clock fault produces and what fencing is for.
 */
import type { HistoryEvent } from './history.js'

export interface TimelineOptions {
  /** Drawn above the picture. */
  readonly title: string
  /**
   * Of the whole SVG, in px.
   * @default 1200
   */
  readonly width?: number
}

/** An SVG picture of a run: what happened, at a glance. */
export function renderTimeline(events: readonly HistoryEvent[], options: TimelineOptions): string {
  const width = options.width ?? 1200
  // parseHistory sorts, but a hand-built or concatenated history may not be; pairing below needs order.
  const sorted = [...events].sort((a, b) => a.t - b.t)
  const t0 = sorted[0]?.t ?? 0
  const runEnd = sorted.at(-1)?.t ?? 0
  const spanMs = Math.max(runEnd - t0, 1)
  const plotLeft = LEFT
  const plotRight = width - RIGHT
  const x = (t: number) => px(plotLeft + ((t - t0) / spanMs) * (plotRight - plotLeft))
  const since = (t: number) => `${((t - t0) / 1000).toFixed(3)} s`

  const laneOfOp = new Map<string, string>()
  for (const e of sorted) if (e.ev === 'acquire-invoke' || e.ev === 'acquire-ok') laneOfOp.set(e.op, e.client)
  const laneOf = (op: string, client: string) =>
    laneOfOp.get(op) ?? (NOT_WORKERS.has(client) ? 'resource' : client)

  const holds = holdsOf(sorted, runEnd)
  const marks = marksOf(sorted, laneOf, since)
  const bands = faultBandsOf(sorted, runEnd)

  const laneNames = new Set<string>()
  for (const e of sorted) if (!NOT_WORKERS.has(e.client)) laneNames.add(e.client)
  for (const item of [...holds, ...marks]) laneNames.add(item.lane)
  const lanes = [...laneNames].sort(byLaneName)

  // Fault labels sit in tracks above the lanes, each label in the first track where it overlaps nothing.
  const trackEnds: number[] = []
  const placed = bands.map((band) => {
    const label = `${band.type} ${band.target}`
    const left = x(band.start)
    const labelWidth = textWidth(label) + 8
    const labelX = Math.max(plotLeft, Math.min(left, plotRight - labelWidth))
    let track = trackEnds.findIndex((end) => end <= labelX)
    if (track === -1) track = trackEnds.push(0) - 1
    trackEnds[track] = labelX + labelWidth + 4
    return { band, label, left, right: Math.max(x(band.end), left + 2), labelX, labelWidth, track }
  })

  const lanesTop = TITLE_H + trackEnds.length * TRACK_H + 4
  const lanesBottom = lanesTop + lanes.length * LANE_H
  const laneMiddle = (lane: string) => lanesTop + lanes.indexOf(lane) * LANE_H + LANE_H / 2
  const faultTypes = [...new Set(bands.map((band) => band.type))]
  const legend = legendItems(faultTypes)
  const legendRows = layoutLegend(legend, width)
  const legendTop = lanesBottom + AXIS_H
  const height = legendTop + legendRows.length * LEGEND_ROW_H + 6
  // Inline SVGs on one report page share one id namespace; a same-titled twin defines the same pattern.
  const hatch = `stale-${hash(options.title)}`

  const out: string[] = []
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="11">`,
    `<defs><pattern id="${hatch}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="${STALE_FILL}"/><line x1="0" y1="0" x2="0" y2="6" stroke="${HOLD_FILL}" stroke-width="2"/></pattern></defs>`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="${plotLeft}" y="18" font-size="14" font-weight="bold" fill="#222">${escapeXml(options.title)}</text>`,
  )

  lanes.forEach((lane, i) => {
    const top = lanesTop + i * LANE_H
    if (i % 2 === 0) {
      out.push(
        `<rect x="${plotLeft}" y="${top}" width="${px(plotRight - plotLeft)}" height="${LANE_H}" fill="#f4f5f7"/>`,
      )
    }
    out.push(
      `<text class="lane-label" x="${plotLeft - 8}" y="${top + LANE_H / 2 + 4}" text-anchor="end" fill="#333">${escapeXml(lane)}</text>`,
    )
  })

  if (sorted.length === 0)
    out.push(`<text x="${plotLeft}" y="${lanesTop + 16}" fill="#555">no events recorded</text>`)
  const ticks = axisTicks(spanMs, plotRight - plotLeft)
  out.push(`<g class="axis" fill="#555">`)
  for (const tick of sorted.length === 0 ? [] : ticks.values) {
    const tx = x(t0 + tick)
    out.push(
      `<line x1="${tx}" y1="${lanesTop}" x2="${tx}" y2="${lanesBottom + 4}" stroke="#ddd"/>`,
      `<text x="${tx}" y="${lanesBottom + 15}" text-anchor="middle">${(tick / 1000).toFixed(ticks.decimals)}</text>`,
    )
  }
  out.push(
    `<line x1="${plotLeft}" y1="${lanesBottom}" x2="${plotRight}" y2="${lanesBottom}" stroke="#888"/>`,
    `<text x="${plotRight}" y="${lanesBottom + 28}" text-anchor="end">seconds since the first event</text>`,
    '</g>',
  )

  for (const { band, label, left, right, labelX, labelWidth, track } of placed) {
    const colour = faultColour(band.type)
    const top = TITLE_H + track * TRACK_H
    const tip = `${band.type} on ${band.target}: ${since(band.start)} → ${since(band.end)}${band.ongoing ? ' (still on at the end of the run)' : ''}`
    out.push(
      `<g class="fault"><title>${escapeXml(tip)}</title>`,
      `<rect x="${left}" y="${top}" width="${px(right - left)}" height="${lanesBottom - top}" fill="${colour}" fill-opacity="0.13"/>`,
      `<line x1="${left}" y1="${top}" x2="${left}" y2="${lanesBottom}" stroke="${colour}" stroke-opacity="0.7"/>`,
      `<rect x="${px(labelX)}" y="${top}" width="${px(labelWidth)}" height="${TRACK_H - 2}" rx="2" fill="${colour}" fill-opacity="0.35"/>`,
      `<text x="${px(labelX + 4)}" y="${top + TRACK_H - 5}" fill="#222">${escapeXml(label)}</text>`,
      '</g>',
    )
  }

  for (const hold of holds) {
    const top = laneMiddle(hold.lane) - BAR_H / 2
    const start = x(hold.start)
    const validEnd = x(Math.min(Math.max(hold.validUntil, hold.start), hold.end))
    const end = x(hold.end)
    const ending = ENDINGS[hold.endedBy]
    const stale =
      hold.end > hold.validUntil
        ? `; believed held ${since(hold.validUntil)} → ${since(hold.end)}, past validity`
        : ''
    const tip = `${hold.op} fence ${hold.fence} (${hold.key}): ${since(hold.start)} → ${since(hold.end)}, ${ending}; valid until ${since(hold.validUntil)}${stale}`
    out.push(`<g class="hold" data-lane="${escapeXml(hold.lane)}"><title>${escapeXml(tip)}</title>`)
    if (validEnd > start) {
      out.push(
        `<rect class="valid" x="${start}" y="${top}" width="${px(validEnd - start)}" height="${BAR_H}" fill="${HOLD_FILL}"/>`,
      )
    }
    if (end > validEnd) {
      out.push(
        `<rect class="stale" x="${validEnd}" y="${top}" width="${px(end - validEnd)}" height="${BAR_H}" fill="url(#${hatch})" stroke="${HOLD_FILL}" stroke-width="0.8"/>`,
      )
    }
    const labelWidth = textWidth(hold.fence) + 8
    if (end - start >= labelWidth) {
      // White on the solid part; dark with a white halo where it has to sit on the hatching.
      const colours =
        validEnd - start >= labelWidth
          ? 'fill="#fff"'
          : 'fill="#0b2545" stroke="#fff" stroke-width="3" paint-order="stroke"'
      out.push(
        `<text class="fence" x="${px(start + 4)}" y="${top + BAR_H - 4}" ${colours} font-weight="bold">${escapeXml(hold.fence)}</text>`,
      )
    }
    out.push('</g>')
  }

  // A rejected write is the mark that matters most when marks crowd: drawn last, it stays on top.
  const layer = (mark: Mark) => MARK_KINDS.indexOf(mark.kind)
  for (const mark of [...marks].sort((a, b) => layer(a) - layer(b))) {
    out.push(
      `<g class="mark ${mark.kind}" data-lane="${escapeXml(mark.lane)}"><title>${escapeXml(mark.tip)}</title>`,
      markShape(mark.kind, x(mark.t), laneMiddle(mark.lane)),
      '</g>',
    )
  }

  legendRows.forEach((row, i) => {
    const y = legendTop + i * LEGEND_ROW_H + LEGEND_ROW_H / 2
    for (const { item, left } of row) {
      out.push(
        `<g class="legend">${item.swatch(left + 8, y, hatch)}`,
        `<text x="${left + 20}" y="${y + 4}" fill="#333">${escapeXml(item.label)}</text></g>`,
      )
    }
  })

  out.push('</svg>')
  return out.join('\n')
}

export interface RunSummary {
  readonly title: string
  /** The run's figures, one table column each (runs may have different ones). */
  readonly figures: Readonly<Record<string, string | number>>
  /** The run's picture, from `renderTimeline`: embedded as is. */
  readonly svg: string
  /** ok: no anomaly; expected: an anomaly the configuration is known to allow; violation: a bug. */
  readonly verdict: 'ok' | 'expected' | 'violation'
}

/** One self-contained HTML page: the figures table (one row per run) and each run's timeline below it. */
export function renderReport(runs: readonly RunSummary[], heading: string): string {
  const columns = [...new Set(runs.flatMap((run) => Object.keys(run.figures)))]
  const header = ['run', 'verdict', ...columns].map((name) => `<th>${escapeXml(name)}</th>`).join('')
  const rows = runs.map((run, i) => {
    const figures = columns.map((column) => {
      const value = run.figures[column]
      return `<td${typeof value === 'number' ? ' class="number"' : ''}>${value === undefined ? '' : escapeXml(String(value))}</td>`
    })
    return `<tr><td><a href="#run-${i + 1}">${escapeXml(run.title)}</a></td><td class="verdict verdict-${run.verdict}">${run.verdict}</td>${figures.join('')}</tr>`
  })
  const sections = runs.map(
    (run, i) =>
      `<section id="run-${i + 1}"><h2>${escapeXml(run.title)} <span class="verdict verdict-${run.verdict}">${run.verdict}</span></h2>\n${run.svg}\n</section>`,
  )
  return [
    '<!doctype html>',
    '<html lang="en"><head><meta charset="utf-8" />',
    `<title>${escapeXml(heading)}</title>`,
    `<style>${REPORT_CSS}</style>`,
    '</head><body>',
    `<h1>${escapeXml(heading)}</h1>`,
    `<table><thead><tr>${header}</tr></thead><tbody>`,
    ...rows,
    '</tbody></table>',
    ...sections,
    '</body></html>',
    '',
  ].join('\n')
}

// Layout, in px. Text widths are estimated (no font metrics in a string builder): CHAR_W over-estimates
// 11 px sans-serif so that a label judged to fit does fit.
const LEFT = 70
const RIGHT = 24
const TITLE_H = 28
const TRACK_H = 16
const LANE_H = 30
const BAR_H = 16
const AXIS_H = 36
const LEGEND_ROW_H = 18
const CHAR_W = 6.6

const HOLD_FILL = '#4a7fc9'
const STALE_FILL = '#dfe9f7'
const NOT_WORKERS = new Set(['resource', 'nemesis'])

/** A type the nemesis is known to inject keeps its colour across runs; another gets one by hash. */
const FAULT_COLOURS: Readonly<Record<string, string>> = {
  'pause-holder': '#9467bd',
  'kill-holder': '#8c564b',
  'server-restart': '#e377c2',
  partition: '#17becf',
  latency: '#bcbd22',
  'lost-reply': '#7f7f7f',
  clock: '#ff7f0e',
}
const OTHER_FAULT_COLOURS = ['#2ca02c', '#d62728', '#1f77b4', '#aa8800', '#555599']

const REPORT_CSS = `
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
table { border-collapse: collapse; margin-bottom: 32px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: left; }
th { background: #f0f0f0; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
.verdict { font-weight: bold; padding: 2px 8px; border-radius: 3px; }
.verdict-ok { background: #d4edda; color: #155724; }
.verdict-expected { background: #fff3cd; color: #856404; }
.verdict-violation { background: #f8d7da; color: #721c24; }
h2 { font-size: 16px; margin-top: 28px; }
svg { max-width: 100%; height: auto; border: 1px solid #e4e4e4; }
`

interface Hold {
  readonly op: string
  readonly lane: string
  readonly key: string
  readonly fence: string
  readonly start: number
  validUntil: number
  end: number
  endedBy: 'release' | 'lost' | 'run-end'
}

const ENDINGS = { release: 'released', lost: 'lost', 'run-end': 'still held at the end of the run' } as const

/** Every acquire-ok, until the first release-invoke or lost of its op (or the run's end). */
function holdsOf(sorted: readonly HistoryEvent[], runEnd: number): Hold[] {
  const holds = new Map<string, Hold>()
  for (const e of sorted) {
    if (e.ev === 'acquire-ok') {
      holds.set(e.op, {
        op: e.op,
        lane: e.client,
        key: e.key,
        fence: e.fence,
        start: e.t,
        validUntil: e.validUntil,
        end: runEnd,
        endedBy: 'run-end',
      })
      continue
    }
    if (e.ev !== 'renew-ok' && e.ev !== 'release-invoke' && e.ev !== 'lost') continue
    const hold = holds.get(e.op)
    if (hold === undefined || hold.endedBy !== 'run-end') continue
    if (e.ev === 'renew-ok') hold.validUntil = Math.max(hold.validUntil, e.validUntil)
    else {
      hold.end = e.t
      hold.endedBy = e.ev === 'lost' ? 'lost' : 'release'
    }
  }
  return [...holds.values()]
}

/** In drawing order, bottom first. */
const MARK_KINDS = ['acquire-maybe', 'write-accepted', 'lost', 'write-rejected'] as const
type MarkKind = (typeof MARK_KINDS)[number]

interface Mark {
  readonly kind: MarkKind
  readonly lane: string
  readonly t: number
  readonly tip: string
}

function marksOf(
  sorted: readonly HistoryEvent[],
  laneOf: (op: string, client: string) => string,
  since: (t: number) => string,
): Mark[] {
  const marks: Mark[] = []
  for (const e of sorted) {
    const at = `at ${since(e.t)}`
    if (e.ev === 'write-accepted' || e.ev === 'write-rejected') {
      const verb = e.ev === 'write-accepted' ? 'accepted' : 'rejected'
      const tip = `${e.op} write ${e.value} with fence ${e.fence} ${verb} (highest before: ${e.highest}) ${at}`
      marks.push({ kind: e.ev, lane: laneOf(e.op, e.client), t: e.t, tip })
    } else if (e.ev === 'lost') {
      marks.push({
        kind: 'lost',
        lane: laneOf(e.op, e.client),
        t: e.t,
        tip: `${e.op} lost ${at}: ${e.reason}`,
      })
    } else if (e.ev === 'acquire-fail' && !e.definite) {
      const tip = `${e.op} acquire failed ${at} and may have been applied: ${e.reason}`
      marks.push({ kind: 'acquire-maybe', lane: laneOf(e.op, e.client), t: e.t, tip })
    }
  }
  return marks
}

function markShape(kind: MarkKind, cx: number, cy: number): string {
  switch (kind) {
    case 'write-accepted':
      return `<line x1="${cx}" y1="${cy - 12}" x2="${cx}" y2="${cy + 12}" stroke="#1e8a3a" stroke-width="2.5"/>`
    case 'write-rejected':
      return `<path d="M${cx - 6} ${cy - 6}L${cx + 6} ${cy + 6}M${cx - 6} ${cy + 6}L${cx + 6} ${cy - 6}" stroke="#fff" stroke-width="5"/><path d="M${cx - 6} ${cy - 6}L${cx + 6} ${cy + 6}M${cx - 6} ${cy + 6}L${cx + 6} ${cy - 6}" stroke="#d62728" stroke-width="2.5"/>`
    case 'lost':
      return `<path d="M${cx} ${cy - 7}L${cx + 7} ${cy}L${cx} ${cy + 7}L${cx - 7} ${cy}Z" fill="#f28c28" stroke="#a35400"/>`
    case 'acquire-maybe':
      return `<circle cx="${cx}" cy="${cy}" r="4.5" fill="#9a9a9a" stroke="#555"/>`
  }
}

interface FaultBand {
  readonly type: string
  readonly target: string
  readonly start: number
  end: number
  ongoing: boolean
}

/** fault-start / fault-end pairs, matched by type and target in order; an end with no start is dropped. */
function faultBandsOf(sorted: readonly HistoryEvent[], runEnd: number): FaultBand[] {
  const bands: FaultBand[] = []
  const open = new Map<string, FaultBand[]>()
  for (const e of sorted) {
    if (e.ev !== 'fault-start' && e.ev !== 'fault-end') continue
    const key = JSON.stringify([e.type, e.target])
    const queue = open.get(key) ?? []
    open.set(key, queue)
    if (e.ev === 'fault-start') {
      const band: FaultBand = { type: e.type, target: e.target, start: e.t, end: runEnd, ongoing: true }
      bands.push(band)
      queue.push(band)
    } else {
      const band = queue.shift()
      if (band === undefined) continue
      band.end = e.t
      band.ongoing = false
    }
  }
  return bands
}

function faultColour(type: string): string {
  return FAULT_COLOURS[type] ?? OTHER_FAULT_COLOURS[hash(type) % OTHER_FAULT_COLOURS.length]!
}

/** Ticks at 1, 2 or 5 × 10ⁿ ms, about one per 90 px, with as many decimals (of seconds) as the step needs. */
function axisTicks(spanMs: number, plotWidth: number): { values: number[]; decimals: number } {
  const wanted = spanMs / Math.max(2, Math.floor(plotWidth / 90))
  const power = 10 ** Math.floor(Math.log10(wanted))
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= wanted) ?? 10 * power
  const values: number[] = []
  for (let tick = 0; tick <= spanMs + 1e-9; tick += step) values.push(tick)
  return { values, decimals: Math.max(0, -Math.floor(Math.log10(step / 1000))) }
}

interface LegendItem {
  readonly label: string
  readonly swatch: (x: number, y: number, hatch: string) => string
}

function legendItems(faultTypes: readonly string[]): LegendItem[] {
  return [
    {
      label: 'held, valid',
      swatch: (x, y) => `<rect x="${x - 7}" y="${y - 5}" width="14" height="10" fill="${HOLD_FILL}"/>`,
    },
    {
      label: 'held past validUntil (stale belief)',
      swatch: (x, y, hatch) =>
        `<rect x="${x - 7}" y="${y - 5}" width="14" height="10" fill="url(#${hatch})" stroke="${HOLD_FILL}" stroke-width="0.8"/>`,
    },
    {
      label: 'write accepted',
      swatch: (x, y) =>
        `<line x1="${x}" y1="${y - 6}" x2="${x}" y2="${y + 6}" stroke="#1e8a3a" stroke-width="2.5"/>`,
    },
    { label: 'write rejected', swatch: (x, y) => markShape('write-rejected', x, y) },
    { label: 'lock lost', swatch: (x, y) => markShape('lost', x, y) },
    { label: 'acquire failed, maybe applied', swatch: (x, y) => markShape('acquire-maybe', x, y) },
    ...faultTypes.map((type) => ({
      label: `fault: ${type}`,
      swatch: (x: number, y: number) =>
        `<rect x="${x - 7}" y="${y - 5}" width="14" height="10" fill="${faultColour(type)}" fill-opacity="0.45"/>`,
    })),
  ]
}

function layoutLegend(items: readonly LegendItem[], width: number): { item: LegendItem; left: number }[][] {
  const rows: { item: LegendItem; left: number }[][] = [[]]
  let left = LEFT
  for (const item of items) {
    const itemWidth = 24 + textWidth(item.label) + 14
    if (left + itemWidth > width - RIGHT && rows.at(-1)!.length > 0) {
      rows.push([])
      left = LEFT
    }
    rows.at(-1)!.push({ item, left })
    left += itemWidth
  }
  return rows
}

/** Workers in numeric order (w2 before w10), then anything else, with the resource last. */
function byLaneName(a: string, b: string): number {
  if (a === 'resource' || b === 'resource') return Number(a === 'resource') - Number(b === 'resource')
  return a.localeCompare(b, 'en', { numeric: true })
}

function textWidth(text: string): number {
  return text.length * CHAR_W
}

function px(value: number): number {
  return Math.round(value * 10) / 10
}

/** FNV-1a: a stable small number for a string (pattern ids, colours of unknown fault types). */
function hash(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193)
  return h >>> 0
}

function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => XML_ENTITIES[c]!)
}

const XML_ENTITIES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
}
