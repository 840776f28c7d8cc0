/**
 * A node:test reporter beside the spec reporter (scripts/run-tests.sh writes it to a file and prints it
 * last when the run fails): for each failing test file, what the spec reporter leaves out or scatters
 * through a long run. A file whose process exited with a non-zero code or by a signal without a failing
 * test shows there only as "test failed"; here it gets its exit code or signal, the failing tests' errors,
 * the runner's diagnostics of that file (an error thrown after its test ended is only a diagnostic, and
 * exit code 1) and the end of its stderr. At most about 60 lines per file. Nothing when all passed.
 *
 * Node 20 gives a file's diagnostics no `file`; it reports the files one after the other, so such a
 * diagnostic belongs to the file of the event before it. Node 24 names the file (relative in some events,
 * absolute in others: every name is made relative to the working folder).
 */
import { relative, resolve } from 'node:path'

const MAX_ERROR_LINES = 12
const MAX_TESTS = 4
const MAX_DIAGNOSTICS = 4
const MAX_STDERR_LINES = 20
/** The run's closing counts ("tests 1695", "pass 1651", ...), diagnostics of no file. */
const RUN_COUNTS = /^(tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) [\d.]+$/

const nameOf = (file) => relative(process.cwd(), resolve(file))

/** The first `max` lines of `text`, indented, saying how many were left out. */
function lines(text, max, indent = '    ') {
  const all = String(text).trimEnd().split('\n')
  const kept = all.slice(0, max).map((line) => indent + line)
  if (all.length > max) kept.push(`${indent}… ${all.length - max} more line(s)`)
  return kept
}

/** Stack frames of Node's own code (the test runner's): never the cause, and they fill the budget. */
const NODE_FRAME = /^\s+at (.* \()?node:/

/** An error as the test's own throw shows it: its stack (which starts with the message) without Node's frames. */
function describe(error) {
  const cause = error?.cause instanceof Error ? error.cause : error
  if (!(cause instanceof Error)) return String(cause ?? error)
  const stack = cause.stack ?? `${cause.name}: ${cause.message}`
  return stack
    .split('\n')
    .filter((line) => !NODE_FRAME.test(line))
    .join('\n')
}

export default async function* failureReport(source) {
  /** Per file: failed, how its process ended, its failing tests' lines, its diagnostics, its stderr. */
  const files = new Map()
  const of = (file) => {
    const name = nameOf(file)
    if (!files.has(name))
      files.set(name, { failed: false, exit: undefined, tests: [], diagnostics: [], stderr: '' })
    return files.get(name)
  }
  let lastFile
  for await (const { type, data } of source) {
    if (data?.file !== undefined) lastFile = data.file
    if (type === 'test:stderr') of(data.file).stderr += data.message
    else if (type === 'test:diagnostic') {
      const file = data.file ?? lastFile
      if (file !== undefined && !RUN_COUNTS.test(data.message)) of(file).diagnostics.push(data.message)
    } else if (type === 'test:fail' && data.file !== undefined) {
      const error = data.details?.error
      const entry = of(data.file)
      entry.failed = true
      // The file itself (its process's exit): the runner's error carries the code and the signal.
      if (error && ('exitCode' in error || 'signal' in error)) {
        entry.exit =
          error.signal != null ? `killed by ${error.signal}` : `exit code ${error.exitCode ?? 'unknown'}`
        entry.exit += error.failureType === 'subtestsFailed' ? '' : ' without a failing test'
      } else if (error?.failureType !== 'subtestsFailed') {
        entry.tests.push([
          `✖ ${data.name} (${error?.failureType ?? 'failed'})`,
          ...lines(describe(error), MAX_ERROR_LINES),
        ])
      }
    }
  }
  const failed = [...files].filter(([, entry]) => entry.failed)
  if (failed.length === 0) return
  const out = [`\n== failure report: ${failed.length} test file(s) failed ==`]
  for (const [name, entry] of failed) {
    out.push(`\n${name}: ${entry.exit ?? 'failed'}`)
    for (const test of entry.tests.slice(0, MAX_TESTS)) out.push(...test.map((line) => `  ${line}`))
    if (entry.tests.length > MAX_TESTS) out.push(`  … ${entry.tests.length - MAX_TESTS} more failing test(s)`)
    for (const message of entry.diagnostics.slice(0, MAX_DIAGNOSTICS)) out.push(...lines(message, 4, '  ℹ '))
    if (entry.diagnostics.length > MAX_DIAGNOSTICS)
      out.push(`  … ${entry.diagnostics.length - MAX_DIAGNOSTICS} more diagnostic(s)`)
    const stderr = entry.stderr.trimEnd()
    if (stderr !== '') {
      const all = stderr.split('\n')
      out.push(
        `  stderr${all.length > MAX_STDERR_LINES ? ` (last ${MAX_STDERR_LINES} of ${all.length} lines)` : ''}:`,
      )
      out.push(...all.slice(-MAX_STDERR_LINES).map((line) => `    ${line}`))
    } else out.push('  stderr: (nothing)')
  }
  yield `${out.join('\n')}\n`
}
