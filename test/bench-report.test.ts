/**
 * The benchmark report as a person sees it: rendered from a small fixture of results (no bench run) and from
 * the committed results, loaded in headless Chromium, which must report no console or page error; every chart
 * draws at most MAX_SERIES series, each in a colour of its own; every store and adapter of the results is on
 * the page with the run's date, command and load. A screenshot of the fixture's page is left in the temp folder.
 */
import assert from 'node:assert/strict'
import { readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { MAX_SERIES, panels, type Results, type Row, renderReport } from '../bench/report.js'
import { type LoadedPage, withPage } from './support/chromium.js'
import { tempDir } from './support/temp.js'

const TIMEOUT = 180_000

/** Deterministic latencies around `median` ms (a fixed LCG, so every run draws the same page). */
function samples(median: number, count = 60, seed = 1): number[] {
  let state = seed
  return Array.from({ length: count }, () => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31
    return median * Math.exp((state / 2 ** 31 - 0.5) * 2)
  })
}

function row(scenario: string, store: string, kind: Row['kind'], adapter: string, at: number): Row {
  const latency = scenario !== 'b'
  return {
    scenario,
    adapter,
    store,
    kind,
    fences: kind === 'fencelock',
    metrics: latency ? { p50: at, p99: at * 3 } : { acquisitionsPerSec: 1000 / at, fairness: 0.5 },
    samples: samples(at, 60, adapter.length + at),
    ...(scenario === 'b' ? { perWorker: [10, 12, 9, 11, 10, 8, 12, 10] } : {}),
  }
}

/** Every family of store, and Redis with more adapters than one chart may draw. */
const STORES: Array<[string, Array<[Row['kind'], string]>]> = [
  [
    'memory',
    [
      ['fencelock', 'fencelock memory'],
      ['peer', 'async-mutex'],
    ],
  ],
  [
    'file',
    [
      ['fencelock', 'fencelock file'],
      ['peer', 'proper-lockfile (defaults)'],
    ],
  ],
  [
    'redis',
    [
      ['fencelock', 'fencelock redis'],
      ['fencelock', 'fencelock redis (fair)'],
      ...(['defaults', 'tuned'] as const).flatMap(
        (mode): Array<[Row['kind'], string]> => [
          ['peer', `redis-semaphore Mutex (${mode})`],
          ['peer', `redlock 1 node (${mode})`],
          ['peer', `@sesamecare-oss/redlock 1 node (${mode})`],
        ],
      ),
      ['floor', 'raw floor: SET NX PX + EVALSHA del'],
      ['floor', 'raw floor: SET NX + pub/sub wake-up'],
    ],
  ],
  [
    'etcd',
    [
      ['fencelock', 'fencelock etcd'],
      ['peer', 'etcd3 Lock + retry loop (50 ms)'],
    ],
  ],
  [
    'zookeeper',
    [
      ['fencelock', 'fencelock zookeeper'],
      ['floor', 'raw floor: zookeeper recipe'],
    ],
  ],
  [
    'postgres',
    [
      ['fencelock', 'fencelock postgres'],
      ['peer', 'advisory-lock (defaults)'],
    ],
  ],
  [
    'mysql',
    [
      ['fencelock', 'fencelock mysql'],
      ['floor', 'raw floor: mysql INSERT'],
    ],
  ],
  [
    's3',
    [
      ['fencelock', 'fencelock s3'],
      ['floor', 'raw floor: s3 PutObject'],
    ],
  ],
  ['gcs', [['fencelock', 'fencelock gcs']]],
  [
    'dynamodb',
    [
      ['fencelock', 'fencelock dynamodb'],
      ['peer', 'dynamodb-lock-client FailOpen (defaults)'],
    ],
  ],
]

const FIXTURE: Results = {
  date: '2026-01-02T03:04:05.000Z',
  machine: '2 × test cpu (x64), 24 GiB, Node v20.0.0',
  runs: 1,
  command: 'BENCH_CYCLES=400 node build/bench/run.js --only a,b,h',
  loadAverage: { start: [9.5, 8.25, 7], end: [10.75, 9, 7.5] },
  scenarios: [
    {
      id: 'a',
      title: 'a — uncontended',
      primary: { metric: 'p50', lowerIsBetter: true, label: 'cycle p50' },
    },
    {
      id: 'b',
      title: 'b — contended',
      primary: { metric: 'acquisitionsPerSec', lowerIsBetter: false, label: 'acquisitions/s' },
    },
    { id: 'h', title: 'h — handoff', primary: { metric: 'p50', lowerIsBetter: true, label: 'handoff p50' } },
  ].map((s) => ({
    ...s,
    rows: STORES.flatMap(([store, adapters], i) =>
      adapters.map(([kind, name], j) => row(s.id, store, kind, name, 0.01 * 10 ** (i / 2) * (1 + j / 3))),
    ),
  })),
}
// An adapter that failed still has its row, and its error is shown.
FIXTURE.scenarios[0]!.rows.push({
  scenario: 'a',
  adapter: 'redlock 5 nodes',
  store: 'redlock',
  kind: 'peer',
  fences: false,
  metrics: {},
  error: 'did not finish within 3 minutes',
})

/** Per chart: its series, and the colours each series is drawn in (stroke for lines, fill for bars). */
const CHARTS = `[...document.querySelectorAll('svg.chart')].map((svg) => {
  const series = {}
  for (const el of svg.querySelectorAll('[data-series]')) {
    const style = getComputedStyle(el)
    const colour = el.tagName === 'rect' ? style.fill : style.stroke
    series[el.dataset.series] = [...new Set([...(series[el.dataset.series] ?? []), colour])]
  }
  return series
})`

async function assertReadable(page: LoadedPage, results: Results): Promise<void> {
  assert.deepEqual(page.errors, [], 'the page reported errors in the browser')
  const charts = await page.evaluate<Array<Record<string, string[]>>>(CHARTS)
  assert.ok(charts.length > 0, 'no chart on the page')
  for (const [i, chart] of charts.entries()) {
    const names = Object.keys(chart)
    assert.ok(names.length > 0, `chart ${i} draws no series`)
    assert.ok(names.length <= MAX_SERIES, `chart ${i} draws ${names.length} series: ${names.join(', ')}`)
    for (const name of names) assert.equal(chart[name]!.length, 1, `chart ${i}: "${name}" in several colours`)
    const colours = names.map((n) => chart[n]![0])
    assert.equal(
      new Set(colours).size,
      colours.length,
      `chart ${i} repeats a colour: ${JSON.stringify(chart)}`,
    )
  }
  // Every store has a panel a person sees; every adapter is in a scenario's table (folded) or its charts.
  const captions = await page.evaluate<string[]>(
    `[...document.querySelectorAll('figcaption')].filter((c) => c.checkVisibility()).map((c) => c.innerText)`,
  )
  const all = await page.evaluate<string>('document.body.textContent')
  for (const s of results.scenarios)
    for (const r of s.rows) {
      assert.ok(all.includes(r.adapter), `${s.id}: ${r.adapter} is not on the page`)
      if (!r.error)
        assert.ok(
          captions.some((c) => c.startsWith(r.store)),
          `${s.id}: no visible panel of ${r.store}`,
        )
    }
  const text = await page.evaluate<string>('document.body.innerText')
  assert.ok(text.includes(results.date), 'the run date is not on the page')
  assert.ok(text.includes(results.command!), 'the command is not on the page')
  assert.match(text, /load average \(1, 5, 15 min\) [\d.]+, [\d.]+, [\d.]+ at the start/)
}

describe('the benchmark report in a browser', () => {
  it('a store with more adapters than a chart draws gets more panels, its fencelock rows in each', () => {
    const redis = FIXTURE.scenarios[0]!.rows.filter((r) => r.store === 'redis')
    const split = panels(redis)
    assert.equal(split.length, 2)
    for (const p of split) {
      assert.ok(p.length <= MAX_SERIES)
      assert.deepEqual(
        p.filter((r) => r.kind === 'fencelock').map((r) => r.adapter),
        ['fencelock redis', 'fencelock redis (fair)'],
      )
    }
    assert.equal(new Set(split.flat()).size, redis.length, 'an adapter is missing from the panels')
  })

  it(
    'renders the fixture with no browser error, readable charts, every store and a screenshot',
    {
      timeout: TIMEOUT,
    },
    async (t) => {
      const dir = tempDir('bench-report')
      try {
        const page = join(dir.path, 'report.html')
        writeFileSync(page, renderReport(FIXTURE))
        await withPage(pathToFileURL(page).href, async (loaded) => {
          await assertReadable(loaded, FIXTURE)
          const text = await loaded.evaluate<string>('document.body.innerText')
          assert.ok(text.includes('did not finish within 3 minutes'), "a failed adapter's error is not shown")
          const png = await loaded.screenshot()
          assert.equal(png.subarray(1, 4).toString(), 'PNG')
          // One path, overwritten by each run, so the screenshots do not pile up in the temp folder.
          const shot = join(tmpdir(), 'fencelock-bench-report.png')
          writeFileSync(shot, png)
          t.diagnostic(`screenshot: ${shot} (${png.length} bytes)`)
        })
      } finally {
        dir.cleanup()
      }
    },
  )

  it(
    'the committed report is this renderer’s page of the committed results, and reads well',
    {
      timeout: TIMEOUT,
    },
    async () => {
      const bench = fileURLToPath(new URL('../../bench/', import.meta.url))
      const results = JSON.parse(readFileSync(join(bench, 'results', 'latest.json'), 'utf8')) as Results
      // ok, not equal: a diff of two whole pages would bury the message.
      assert.ok(
        readFileSync(join(bench, 'report.html'), 'utf8') === renderReport(results),
        'bench/report.html is stale: run `node build/bench/report.js` to render it from bench/results/latest.json',
      )
      await withPage(pathToFileURL(join(bench, 'report.html')).href, (page) => assertReadable(page, results))
    },
  )

  it('the browser check catches a page error and a broken chart', { timeout: TIMEOUT }, async () => {
    const dir = tempDir('bench-report-broken')
    try {
      const page = join(dir.path, 'broken.html')
      writeFileSync(
        page,
        '<!doctype html><html><body><svg><polyline points="NaN,1 2,2" stroke="red"/></svg><script>console.error("boom"); null.x</script></body></html>',
      )
      await withPage(pathToFileURL(page).href, async ({ errors }) => {
        assert.ok(
          errors.some((e) => e.includes('boom')),
          `console.error not caught: ${errors.join('; ')}`,
        )
        assert.ok(
          errors.some((e) => e.startsWith('exception:')),
          `exception not caught: ${errors.join('; ')}`,
        )
        assert.ok(
          errors.some((e) => e.includes('polyline')),
          `SVG error not caught: ${errors.join('; ')}`,
        )
      })
    } finally {
      dir.cleanup()
    }
  })
})
