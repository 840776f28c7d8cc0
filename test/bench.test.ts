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
