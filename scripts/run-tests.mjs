/**
 * Runs the test files with node:test's `run()` in the order given (scripts/run-tests.sh gives them
 * longest first): `node --test` sorts its files by path, whatever order they come in, so a slow file late
 * in the path order starts when the other lane has nothing left to run. The reporters are the ones the
 * command line would set: spec on stdout, and scripts/failure-report.mjs and scripts/durations-report.mjs
 * each into its file. The exit code is the command line's: 1 when a test failed (a todo test excepted).
 *
 * Usage: node scripts/run-tests.mjs <lanes> <failure report file> <durations file> [--test-name-pattern=<re>]... -- <test file>...
 */
import { createWriteStream } from 'node:fs'
import { run } from 'node:test'
import { spec } from 'node:test/reporters'
import { parseArgs } from 'node:util'
import durationsReport from './durations-report.mjs'
import failureReport from './failure-report.mjs'

const argv = process.argv.slice(2)
const dash = argv.indexOf('--')
const files = dash < 0 ? [] : argv.slice(dash + 1)
const { values, positionals } = parseArgs({
  args: dash < 0 ? argv : argv.slice(0, dash),
  allowPositionals: true,
  options: { 'test-name-pattern': { type: 'string', multiple: true } },
})
const [lanes, failuresPath, durationsPath] = positionals
if (positionals.length !== 3 || files.length === 0) {
  throw new Error(
    'usage: run-tests.mjs <lanes> <failures file> <durations file> [--test-name-pattern=<re>]... -- <file>...',
  )
}

const patterns = values['test-name-pattern']?.map((pattern) => new RegExp(pattern))
// forceExit: a file whose tests all ended exits even if something it opened is still open (a test that
// failed before closing its proxy): without it that file, and so the whole run, would wait forever.
const stream = run({
  files,
  concurrency: Number(lanes),
  forceExit: true,
  ...(patterns ? { testNamePatterns: patterns } : {}),
})
// Three reporters each add their listeners to the one stream, as the command line's do.
stream.setMaxListeners(30)
stream.on('test:fail', (data) => {
  if (data.todo === undefined || data.todo === false) process.exitCode = 1
})
stream.compose(new spec()).pipe(process.stdout)
stream.compose(failureReport).pipe(createWriteStream(failuresPath))
stream.compose(durationsReport).pipe(createWriteStream(durationsPath))
