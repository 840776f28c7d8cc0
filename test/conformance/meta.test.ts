import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'

// Tests run from build/test/conformance; the sources sit at the repository root.
const root = fileURLToPath(new URL('../../../', import.meta.url))

it('every backend folder has a conformance entry that runs the shared suite', () => {
  const backends = readdirSync(`${root}src/backends`, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
  assert.ok(backends.length >= 2, `found no backends under ${root}src/backends`)
  const missing = backends.filter((name) => {
    const entry = `${root}test/backends/${name}.test.ts`
    return !existsSync(entry) || !/defineConformanceSuite\(/.test(readFileSync(entry, 'utf8'))
  })
  assert.deepEqual(
    missing,
    [],
    `backends without test/backends/<name>.test.ts calling defineConformanceSuite: ${missing}`,
  )
})
