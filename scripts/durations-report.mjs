/**
 * A node:test reporter beside the spec reporter (scripts/run-tests.sh writes it to a file): each test
 * file's duration, one `<seconds>\t<file>` line per file, slowest first, written once the run ends. The
 * script prints the slowest lines last, so a CI log shows where the time went; the next run reads the
 * file to start the slowest files first (scripts/test-order.mjs).
 *
 * Both Node 20 and Node 24 end each file with a `test:complete` event at nesting 0 whose name is the file
 * itself and whose duration is the file's whole process: Node 20 names it by its absolute path, Node 24
 * by the path given on the command line (every name is made relative to the working folder). That event
 * comes also for a file whose process failed or was killed. Other events are no measure of a file: their
 * `file` is where the test was declared (a shared suite's module, for the conformance suites).
 */
import { relative, resolve } from 'node:path'

const nameOf = (file) => relative(process.cwd(), resolve(file))

export default async function* durationsReport(source) {
  /** Seconds per file, from the runner's event for the file itself. */
  const seconds = new Map()
  for await (const { type, data } of source) {
    if (type !== 'test:complete' || data?.file === undefined || data.nesting !== 0) continue
    const name = nameOf(data.file)
    if (nameOf(data.name) === name) seconds.set(name, (data.details?.duration_ms ?? 0) / 1000)
  }
  const rows = [...seconds].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
  yield rows.map(([name, s]) => `${s.toFixed(1)}\t${name}\n`).join('')
}
