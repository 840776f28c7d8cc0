/**
 * The order scripts/run-tests.sh hands the test files to the runner, which starts them in that order as
 * its lanes free up: longest first (a longest-processing-time schedule), so that the run does not end on
 * one slow file started last while the other lanes sit idle.
 *
 * Usage: node scripts/test-order.mjs <durations file> <test file>... ; prints the files, one a line.
 *
 * A file's length is what the last run took (the durations file scripts/durations-report.mjs wrote), so
 * no list of slow files is kept by hand. A file the record lacks (a new one, or no record yet: a fresh
 * checkout) goes before the recorded ones, the chaos parts and conformance suites first (the long
 * kinds: they wait out leases, faults and store write rates), then the others in path order: a long new
 * file started last would cost more than a short one started early.
 */
import { existsSync, readFileSync } from 'node:fs'

const [recordPath, ...files] = process.argv.slice(2)

/** Seconds per file from the record's `<seconds>\t<file>` lines (an absent or cut-short record is empty). */
const recorded = new Map()
if (recordPath !== undefined && existsSync(recordPath)) {
  for (const line of readFileSync(recordPath, 'utf8').split('\n')) {
    const [seconds, file] = line.split('\t')
    if (file !== undefined && Number.isFinite(Number(seconds))) recorded.set(file, Number(seconds))
  }
}

/** The kinds of file that take minutes: the chaos parts, and the conformance suites of the backends. */
const LONG_KIND = /(^|\/)chaos\/chaos-\d+\.test\.js$|(^|\/)conformance\.test\.js$/

const unknown = files.filter((file) => !recorded.has(file)).sort()
const order = [
  ...unknown.filter((file) => LONG_KIND.test(file)),
  ...unknown.filter((file) => !LONG_KIND.test(file)),
  ...files
    .filter((file) => recorded.has(file))
    .sort((a, b) => recorded.get(b) - recorded.get(a) || a.localeCompare(b)),
]
process.stdout.write(order.map((file) => `${file}\n`).join(''))
