/**
 * No test leaves a promise without a rejection handler while it awaits something else: a test that starts
 * an acquire (or a wait, a release, a close), then awaits a release or a sleep before it awaits the
 * acquire, lets a rejection that lands in between be reported as unhandled, which fails the run on a
 * loaded machine only. Such promises are wrapped in `awaitLater` (test/support/later.ts) where they are
 * made. A cheap check, read from the sources: a `const`/`let` that starts one of the library's calls
 * without awaiting it, whose first use comes after another `await`.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'

// Tests run from build/test/docs; the sources sit at the repository root.
const root = fileURLToPath(new URL('../../../', import.meta.url))

/**
 * Calls that start a promise that may reject: the lock API, the backend contract, the engines and their
 * drivers, the SDK calls of the test servers' own tests.
 */
const STARTS =
  /\.(acquire|tryAcquire|acquireAll|extend|release|withLock|close|campaign|wait|waitForChange|abandon|inspect|attempt|read|write|save|send)\(/
/** Handled where it is made. */
const HANDLED = /awaitLater\(|\.catch\(|\.then\(/

/** The lines of the statement that starts at `lines[start]`: until its brackets close and no `.chain` follows. */
function statementEnd(lines: readonly string[], start: number): number {
  let depth = 0
  let end = start
  const count = (line: string) => {
    for (const c of line) {
      if ('([{'.includes(c)) depth++
      else if (')]}'.includes(c)) depth--
    }
  }
  count(lines[start]!)
  while (end + 1 < lines.length && (depth > 0 || /^\s*\./.test(lines[end + 1]!))) count(lines[++end]!)
  return end
}

/** `file:line name` of every promise made without a handler and first used after another await. */
export function lateHandlers(file: string, text: string): string[] {
  const lines = text.split('\n')
  const found: string[] = []
  for (let i = 0; i < lines.length; i++) {
    const m = lines[i]!.match(/^(\s*)(?:const|let)\s+(\w+)\s*=\s*(.*)$/)
    if (!m || /\bawait\b/.test(m[3]!) || /^(async\b|\(|function\b|new Promise)/.test(m[3]!)) continue
    const end = statementEnd(lines, i)
    const statement = lines.slice(i, end + 1).join('\n')
    if (!STARTS.test(statement) || HANDLED.test(statement)) continue
    const [, indent, name] = m
    const used = new RegExp(`\\b${name}\\b`)
    let awaited = false
    for (let j = end + 1; j < lines.length; j++) {
      const line = lines[j]!
      // The end of the block the promise was made in.
      if (line.trim() && line.length - line.trimStart().length < indent!.length) break
      if (used.test(line)) {
        if (awaited) found.push(`${file}:${i + 1} ${name}`)
        break
      }
      if (/\bawait\b/.test(line)) awaited = true
    }
  }
  return found
}

it('finds the shape it looks for', () => {
  const late = [
    "  const pending = locks.acquire(key, { signal, timeout: '20s' })",
    '  await holder.release()',
    '  await assert.rejects(pending)',
  ].join('\n')
  assert.deepEqual(lateHandlers('t.ts', late), ['t.ts:1 pending'])
  const wrapped = late
    .replace('= locks.acquire(key', '= awaitLater(locks.acquire(key')
    .replace("'20s' })", "'20s' }))")
  assert.deepEqual(lateHandlers('t.ts', wrapped), [])
  const awaitedFirst = late
    .split('\n')
    .filter((line) => !line.includes('holder'))
    .join('\n')
  assert.deepEqual(lateHandlers('t.ts', awaitedFirst), [])
})

it('no test attaches a rejection handler only after awaiting something else', () => {
  const dir = join(root, 'test')
  const files = readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts'))
  assert.ok(files.length > 50, 'found no test sources')
  const found = files.flatMap((f) =>
    lateHandlers(relative(root, join(dir, f)), readFileSync(join(dir, f), 'utf8')),
  )
  assert.deepEqual(found, [], 'wrap these in awaitLater (test/support/later.ts) where they are made')
})
