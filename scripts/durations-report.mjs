/**
 * A node:test reporter beside the spec reporter (scripts/run-tests.sh writes it to a file): each test
 * file's duration, one `<seconds>\t<file>` line per file, slowest first, written once the run ends. The
 * script prints the slowest lines last, so a CI log shows where the time went; the next run reads the
 * file to start the slowest files first (scripts/test-order.mjs).
 *
 * Both Node 20 and Node 24 end each file with a `test:complete` event at nesting 0 whose name is the file
 * itself and whose duration is the file's whole process: Node 20 names it by its absolute path, Node 24
 * by the path given on the command line (every name is made relative to the working folder). A file
 * without that event (its process cut short) gets the sum of its top-level tests' durations.
 */
import { relative, resolve } from 'node:path'

const nameOf = (file) => relative(process.cwd(), resolve(file))

export default async function* durationsReport(source) {
  /** Per file: its own duration when the runner reported it, and the sum of its top-level tests. */
  const files = new Map()
  const of = (file) => {
    const name = nameOf(file)
    if (!files.has(name)) files.set(name, { own: undefined, tests: 0 })
    return files.get(name)
  }
  for await (const { type, data } of source) {
    if (type !== 'test:complete' || data?.file === undefined || data.nesting !== 0) continue
    const ms = data.details?.duration_ms ?? 0
    const entry = of(data.file)
    if (nameOf(data.name) === nameOf(data.file)) entry.own = ms
    else entry.tests += ms
  }
  const rows = [...files].map(([name, { own, tests }]) => [(own ?? tests) / 1000, name])
  rows.sort((a, b) => b[0] - a[0] || a[1].localeCompare(b[1]))
  yield rows.map(([seconds, name]) => `${seconds.toFixed(1)}\t${name}\n`).join('')
}
