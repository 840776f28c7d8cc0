/**
 * The test run's own scripts: scripts/test-order.mjs puts the files longest first (by the last run's
 * durations, unrecorded files first), scripts/run-tests.mjs starts them in that order (`node --test` would
 * sort them by path), writes each file's duration (scripts/durations-report.mjs) and exits 1 when a test
 * failed, as the command line does.
 */
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { tempDir } from '../support/temp.js'

const root = fileURLToPath(new URL('../../../', import.meta.url))
const ORDER = `${root}scripts/test-order.mjs`
const RUN = `${root}scripts/run-tests.mjs`

describe('the test run: longest files first, and each file timed', () => {
  const dir = tempDir('run-tests')
  after(() => dir.cleanup())
  const startLog = join(dir.path, 'started')
  /** A test file that notes its start in `startLog` and passes, or fails. */
  const testFile = (name: string, fails = false) => {
    const path = join(dir.path, `${name}.test.mjs`)
    writeFileSync(
      path,
      `import { test } from 'node:test'\nimport { appendFileSync } from 'node:fs'\n` +
        `test(${JSON.stringify(name)}, () => {\n  appendFileSync(${JSON.stringify(startLog)}, ${JSON.stringify(`${name}\n`)})\n` +
        (fails ? `  throw new Error('failing on purpose')\n` : '') +
        '})\n',
    )
    return path
  }

  it('orders by the recorded durations, longest first, the unrecorded ones before them', () => {
    const record = join(dir.path, 'record.txt')
    writeFileSync(record, 'longest\n9.5\tb/slow.test.js\n0.2\ta/quick.test.js\n40.1\tc/slowest.test.js\n')
    const files = [
      'a/quick.test.js',
      'b/slow.test.js',
      'c/slowest.test.js',
      'd/new.test.js',
      'x/conformance.test.js',
    ]
    const order = execFileSync(process.execPath, [ORDER, record, ...files], { encoding: 'utf8' })
    assert.deepEqual(order.trim().split('\n'), [
      'x/conformance.test.js',
      'd/new.test.js',
      'c/slowest.test.js',
      'b/slow.test.js',
      'a/quick.test.js',
    ])
    // No record yet (a fresh checkout): the long kinds first, then path order.
    const fresh = execFileSync(process.execPath, [ORDER, join(dir.path, 'none.txt'), ...files], {
      encoding: 'utf8',
    })
    assert.deepEqual(fresh.trim().split('\n'), [
      'x/conformance.test.js',
      'a/quick.test.js',
      'b/slow.test.js',
      'c/slowest.test.js',
      'd/new.test.js',
    ])
  })

  it('starts the files in the order given, times each, and exits 1 when one fails', () => {
    // A file whose test is declared in a module of its own (as the conformance suites are), and one whose
    // process is killed: each is timed under its own name, and the module not at all.
    const shared = join(dir.path, 'shared.mjs')
    writeFileSync(
      shared,
      `import { test } from 'node:test'\nexport const declare = () => test('shared', () => {})\n`,
    )
    const declaring = join(dir.path, 'declaring.test.mjs')
    writeFileSync(declaring, `import { declare } from './shared.mjs'\ndeclare()\n`)
    const killed = join(dir.path, 'killed.test.mjs')
    writeFileSync(killed, `process.kill(process.pid, 'SIGKILL')\n`)
    const files = [testFile('zulu'), testFile('alpha', true), testFile('mike'), declaring, killed]
    const failures = join(dir.path, 'failures.txt')
    const durations = join(dir.path, 'durations.txt')
    // One lane, so the start order is the order given; without this runner's mark on the environment,
    // which would make that run() refuse to run files inside a test file.
    const { NODE_TEST_CONTEXT: _, ...env } = process.env
    const result = spawnSync(process.execPath, [RUN, '1', failures, durations, '--', ...files], {
      encoding: 'utf8',
      cwd: dir.path,
      env,
    })
    assert.equal(result.status, 1, `${result.stdout}\n${result.stderr}`)
    assert.deepEqual(readFileSync(startLog, 'utf8').trim().split('\n'), ['zulu', 'alpha', 'mike'])
    const timed = readFileSync(durations, 'utf8').trim().split('\n')
    assert.deepEqual(timed.map((line) => line.split('\t')[1]).sort(), [
      'alpha.test.mjs',
      'declaring.test.mjs',
      'killed.test.mjs',
      'mike.test.mjs',
      'zulu.test.mjs',
    ])
    for (const line of timed) assert.match(line, /^\d+\.\d\t/)
    assert.match(readFileSync(failures, 'utf8'), /alpha\.test\.mjs: failed/)
  })

  it('ends a file whose tests are done though it left a server open', () => {
    // Without the runner's forceExit this file's process never exits, and neither does the run.
    const open = join(dir.path, 'open.test.mjs')
    writeFileSync(
      open,
      `import { test } from 'node:test'\nimport { createServer } from 'node:net'\n` +
        `test('leaves a server listening', () => { createServer().listen(0, '127.0.0.1') })\n`,
    )
    const { NODE_TEST_CONTEXT: _, ...env } = process.env
    const result = spawnSync(
      process.execPath,
      [RUN, '1', join(dir.path, 'open-failures.txt'), join(dir.path, 'open-durations.txt'), '--', open],
      { encoding: 'utf8', cwd: dir.path, env, timeout: 60_000, killSignal: 'SIGKILL' },
    )
    assert.equal(result.signal, null, 'the run did not end by itself within 60 s')
    assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`)
  })
})
