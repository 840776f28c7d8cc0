/**
 * A scenario's table as the runners print it (markdown, for the terminal and the README), with the ratio
 * of each fencelock row to the best peer and to the floor on the same store, measured in the same run.
 */
import type { Results, Row } from './report.js'
import { fmt } from './stats.js'

/** The ratio of a fencelock row to the best peer (or floor) on the same store, on the scenario's primary figure. */
export function ratio(
  row: Row,
  rows: Row[],
  primary: { metric: string; lowerIsBetter: boolean },
  against: Row['kind'] = 'peer',
): number | undefined {
  if (row.kind !== 'fencelock') return undefined
  const peers = rows.filter(
    (r) => r.kind === against && r.store === row.store && r.metrics[primary.metric] !== undefined,
  )
  const values = peers.map((p) => p.metrics[primary.metric]!).filter(Number.isFinite)
  if (values.length === 0 || row.metrics[primary.metric] === undefined) return undefined
  const best = primary.lowerIsBetter ? Math.min(...values) : Math.max(...values)
  return row.metrics[primary.metric]! / best
}

export function printTable(s: Results['scenarios'][number]): void {
  const metricNames = [...new Set(s.rows.flatMap((r) => Object.keys(r.metrics)))]
  const better = s.primary.lowerIsBetter ? 'lower is better' : 'higher is better'
  console.log(`\n### ${s.title}\n`)
  console.log(
    `| adapter | store | fence | ${metricNames.join(' | ')} | fencelock / best peer (${s.primary.label}, ${better}) | fencelock / floor |`,
  )
  console.log(`|---|---|---|${metricNames.map(() => '---|').join('')}---|---|`)
  for (const row of s.rows) {
    const r = ratio(row, s.rows, s.primary)
    const f = ratio(row, s.rows, s.primary, 'floor')
    const cells = metricNames.map((m) => {
      const v = row.metrics[m]
      return v === undefined
        ? row.error
          ? 'error'
          : ''
        : fmt(v, m.startsWith('p') || m.startsWith('handoff') ? 3 : 2)
    })
    console.log(
      `| ${row.adapter}${row.error ? ` (${row.error.slice(0, 60)})` : ''} | ${row.store} | ${row.fences ? 'yes' : 'no'} | ${cells.join(' | ')} | ${r === undefined ? '' : `${fmt(r, 2)}×`} | ${f === undefined ? '' : `${fmt(f, 2)}×`} |`,
    )
  }
}
