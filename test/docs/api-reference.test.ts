/**
 * docs/api/ is generated from the doc comments by TypeDoc (`npm run docs:api`, typedoc.config.mjs) and
 * committed, so the reference renders where the docs are read (the repository's pages) without a build.
 * This regenerates it into build/ and fails, naming the pages, when the committed ones differ.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readdirSync, readFileSync, rmSync } from 'node:fs'
import { join, relative } from 'node:path'
import { it } from 'node:test'
import { promisify } from 'node:util'
import { root } from './pages.js'

/** Every file under `dir`, relative to it, with its text. */
function tree(dir: string): Map<string, string> {
  const files = new Map<string, string>()
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue
    const path = join(entry.parentPath, entry.name)
    files.set(relative(dir, path).split('\\').join('/'), readFileSync(path, 'utf8'))
  }
  return files
}

it('docs/api/ is what TypeDoc makes of the doc comments now', async () => {
  const out = join(root, 'build', 'docs-api')
  rmSync(out, { recursive: true, force: true })
  const typedoc = join(root, 'node_modules', 'typedoc', 'bin', 'typedoc')
  // TypeDoc type-checks the whole package: minutes on a loaded machine.
  await promisify(execFile)(process.execPath, [typedoc, '--options', 'typedoc.config.mjs', '--out', out], {
    cwd: root,
    timeout: 600_000,
  })
  const made = tree(out)
  const committed = tree(join(root, 'docs', 'api'))
  const stale = [...new Set([...made.keys(), ...committed.keys()])]
    .filter((page) => made.get(page) !== committed.get(page))
    .sort()
  assert.deepEqual(stale, [], 'run `npm run docs:api` and commit docs/api/')
})
