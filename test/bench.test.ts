import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { tempDir } from './support/temp.js'

const RUN = fileURLToPath(new URL('../bench/run.js', import.meta.url))

// A smoke run of the harness (tiny numbers, one scenario): the tables, the JSON and the report must come
// out whole. Speed itself is measured by `npm run bench`, never asserted here.
it('the benchmark harness runs and writes its table, JSON and report', { timeout: 120_000 }, async () => {
  const out = tempDir('bench-smoke')
  try {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [RUN, '--only', 'a,b', '--match', 'fencelock memory,async-mutex', '--out', out.path],
      { env: { ...process.env, BENCH_CYCLES: '50', BENCH_CONTENDED_MS: '300' } },
    )
    assert.match(stdout, /\| fencelock memory \| memory \| yes \|.*\d+\.\d+× \|/)
    const results = JSON.parse(readFileSync(join(out.path, 'results', 'latest.json'), 'utf8'))
    const contended = results.scenarios.find((s: { id: string }) => s.id === 'b')
    for (const row of contended.rows) assert.equal(row.metrics.overlaps, 0, `${row.adapter} overlapped`)
    const html = readFileSync(join(out.path, 'report.html'), 'utf8')
    assert.match(html, /<svg/)
    assert.match(html, /fencelock memory/)
  } finally {
    out.cleanup()
  }
})

const SCALE = fileURLToPath(new URL('../bench/scale-run.js', import.meta.url))

// A smoke run of the scale runner on Redis (tiny counts, every scenario): each table and the JSON must come
// out whole, so the runner cannot rot. The figures themselves are measured by `npm run bench:scale`.
it('the scale runner runs s1–s4 and writes its tables and JSON', { timeout: 120_000 }, async () => {
  const out = tempDir('bench-scale-smoke')
  try {
    const run = (args: string[]) =>
      promisify(execFile)(process.execPath, [SCALE, ...args, '--out', out.path], { maxBuffer: 2 ** 24 })
    const { stdout } = await run([
      ...['--only', 's1,s2,s4', '--counts', '20', '--ttls', '1000', '--hold', '500', '--ops', '40'],
      ...['--match', 'fencelock redis,redis-semaphore Mutex (defaults),raw floor: fenced'],
    ])
    for (const id of ['s1', 's2', 's4']) assert.match(stdout, new RegExp(`### ${id} — `))
    assert.match(stdout, /\| fencelock redis \| redis \| yes \|.*\d+\.\d+× \|/)
    const results = JSON.parse(readFileSync(join(out.path, 'results', 'scale-latest.json'), 'utf8'))
    const rows = results.scenarios.flatMap((s: { rows: Array<{ error?: string }> }) => s.rows)
    for (const row of rows) assert.equal(row.error, undefined, JSON.stringify(row))
    const s2 = results.scenarios.find((s: { id: string }) => s.id.startsWith('s2'))
    for (const row of s2.rows) assert.equal(row.metrics.lost, 0, `${row.adapter} lost a lock`)
    // s3 starts 4 processes per adapter: one adapter, 4 waiters.
    const waiting = await run([
      ...[
        '--only',
        's3',
        '--counts',
        '4',
        '--idle',
        '300',
        '--contended',
        '300',
        '--match',
        'fencelock redis',
      ],
    ])
    assert.match(waiting.stdout, /### s3 — /)
    const s3 = JSON.parse(readFileSync(join(out.path, 'results', 'scale-latest.json'), 'utf8'))
    for (const row of s3.scenarios[0].rows) assert.equal(row.metrics.overlaps, 0, `${row.adapter} overlapped`)
  } finally {
    out.cleanup()
  }
})

const ELECTION = fileURLToPath(new URL('../bench/election-run.js', import.meta.url))

// A smoke run of the election runner (one round, one store): the table and the JSON must come out whole, so
// the runner cannot rot. The figures themselves are measured by `npm run bench:election`.
it('the election runner times a new leader after a kill and a resign', { timeout: 120_000 }, async () => {
  const out = tempDir('bench-election-smoke')
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [
      ...[ELECTION, '--rounds', '1', '--ttl', '2000', '--settle', '300'],
      ...['--match', 'fencelock file', '--out', out.path],
    ])
    assert.match(stdout, /### e — /)
    assert.match(stdout, /\| fencelock file \| file \| yes \| \d+\.\d+ \|/)
    const results = JSON.parse(readFileSync(join(out.path, 'results', 'election-latest.json'), 'utf8'))
    const [row] = results.scenarios[0].rows
    assert.equal(row.error, undefined, JSON.stringify(row))
    for (const metric of ['killP50', 'resignP50'])
      assert.ok(row.metrics[metric] >= 0, `${metric}: ${row.metrics[metric]}`)
  } finally {
    out.cleanup()
  }
})

const SEMAPHORE = fileURLToPath(new URL('../bench/semaphore-run.js', import.meta.url))

// A smoke run of the semaphore runner (tiny counts, fencelock's two layouts and the peer on Redis): every scenario's table
// and the JSON must come out whole. The figures are measured by `npm run bench:semaphore`.
it(
  'the semaphore runner measures throughput, handoff and requests while waiting',
  { timeout: 180_000 },
  async () => {
    const out = tempDir('bench-semaphore-smoke')
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [
        ...[SEMAPHORE, '--seconds', '0.3', '--rounds', '1', '--wait', '0.3', '--settle', '100'],
        ...['--match', 'fencelock redis,redis-semaphore Semaphore', '--out', out.path],
      ])
      for (const id of ['t', 'h', 'r']) assert.match(stdout, new RegExp(`### ${id} — `))
      const results = JSON.parse(readFileSync(join(out.path, 'results', 'semaphore-latest.json'), 'utf8'))
      const metrics: Record<string, string> = {
        t: 'permitsPerSec',
        h: 'handoffP50',
        r: 'requestsPerWaitingSec',
      }
      for (const scenario of results.scenarios) {
        assert.equal(scenario.rows.length, 3, `${scenario.id}: ${JSON.stringify(scenario.rows)}`)
        for (const row of scenario.rows) {
          assert.equal(row.error, undefined, JSON.stringify(row))
          const value = row.metrics[metrics[scenario.id]!]
          assert.ok(value >= 0, `${scenario.id} ${row.adapter}: ${value}`)
        }
      }
    } finally {
      out.cleanup()
    }
  },
)

// Each store's semaphore floor runs, keeps the limit (scenario r fails a row whose waiter is granted while
// the limit is held; t counts grants beyond it) and hands a permit over to a waiter: a floor that admitted
// too many would make every fencelock / floor ratio meaningless.
it('every semaphore floor keeps the limit and hands a permit to a waiter', { timeout: 300_000 }, async () => {
  const out = tempDir('bench-semaphore-floors')
  try {
    await promisify(execFile)(process.execPath, [
      ...[SEMAPHORE, '--seconds', '0.5', '--rounds', '1', '--wait', '0.2', '--settle', '100'],
      ...['--match', 'raw floor', '--out', out.path],
    ])
    const results = JSON.parse(readFileSync(join(out.path, 'results', 'semaphore-latest.json'), 'utf8'))
    const rowsOf = (id: string) =>
      results.scenarios.find((s: { id: string }) => s.id === id).rows as Array<{
        store: string
        adapter: string
        error?: string
        metrics: Record<string, number>
      }>
    // The counting floors, and the slots floors on Redlock and S3 (the conditional-write family).
    const stores = ['memory', 'file', 'redis', 'etcd', 'postgres', 'mysql', 'zookeeper', 'redis x5', 's3']
    assert.deepEqual(
      rowsOf('t')
        .map((r) => r.store)
        .sort(),
      [...stores].sort(),
    )
    for (const row of rowsOf('t')) {
      assert.equal(row.error, undefined, JSON.stringify(row))
      assert.equal(row.metrics.overlaps, 0, `${row.adapter} admitted more than the limit`)
      assert.ok(row.metrics.permitsPerSec! > 0, JSON.stringify(row))
    }
    for (const id of ['h', 'r'])
      for (const row of rowsOf(id)) assert.equal(row.error, undefined, JSON.stringify(row))
  } finally {
    out.cleanup()
  }
})
