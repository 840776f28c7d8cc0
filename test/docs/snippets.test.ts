/**
 * Every ```ts and ```js block of README.md, CONTRIBUTING.md and docs/ compiles against the package's own
 * sources and the drivers' types, under the strict settings the package promises (`strict`,
 * `exactOptionalPropertyTypes`, `noUncheckedIndexedAccess`). A block may use the names a page sets up in
 * prose (`locks`, `lock`, `sql`, `pool`, `redis`, `body`…: compile.ts declares them), and a block's own declarations shadow
 * them. The README's quickstart is also run (test/examples.test.ts).
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { compileSamples } from './compile.js'
import { codeBlocks, pages } from './pages.js'

it('every ts and js block in the docs compiles', () => {
  const blocks = pages()
    .flatMap(codeBlocks)
    .filter((b) => ['ts', 'typescript', 'js', 'javascript'].includes(b.lang))
  assert.ok(blocks.length >= 10, `only ${blocks.length} code blocks found`)
  const samples = blocks.map((b) => ({
    where: `${b.page}:${b.line}`,
    code: b.code,
    lang: b.lang.startsWith('t') ? ('ts' as const) : ('js' as const),
  }))
  assert.deepEqual(compileSamples(samples, 'docs-snippets'), [])
})
