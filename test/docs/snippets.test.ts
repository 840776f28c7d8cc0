/**
 * Every ```ts and ```js block of README.md, CONTRIBUTING.md and docs/ compiles against the package's own
 * sources and the drivers' types, under the strict settings the package promises (`strict`,
 * `exactOptionalPropertyTypes`, `noUncheckedIndexedAccess`). A block may use the names a page sets up in
 * prose (`locks`, `sql`, `body`): they are declared once below, and a block's own declarations shadow them.
 * The README's quickstart is also run (test/examples.test.ts).
 */
import assert from 'node:assert/strict'
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { it } from 'node:test'
import ts from 'typescript'
import { codeBlocks, pages, root } from './pages.js'

/** What a block may take as given: the objects the pages build in an earlier block or in prose. */
const GIVEN = `import type { LockClient } from 'fencelock'
import type { Sql } from 'postgres'
declare global {
  const locks: LockClient
  const sql: Sql
  const body: string
}
export {}
`

const SUBPATHS = [
  'memory',
  'file',
  'redis',
  'redlock',
  'etcd',
  'zookeeper',
  's3',
  'gcs',
  'dynamodb',
  'postgres',
  'mysql',
]

it('every ts and js block in the docs compiles', () => {
  const blocks = pages()
    .flatMap(codeBlocks)
    .filter((b) => ['ts', 'typescript', 'js', 'javascript'].includes(b.lang))
  assert.ok(blocks.length >= 10, `only ${blocks.length} code blocks found`)
  const dir = join(root, 'build', 'docs-snippets')
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'given.d.ts'), GIVEN)
  const names = new Map<string, string>()
  for (const [i, block] of blocks.entries()) {
    const ext = block.lang.startsWith('t') ? 'ts' : 'js'
    const name = join(dir, `${block.page.replace(/[/.]/g, '_')}-${block.line}-${i}.${ext}`)
    writeFileSync(name, block.code)
    names.set(name, `${block.page}:${block.line}`)
  }
  const src = join(root, 'src')
  const program = ts.createProgram([join(dir, 'given.d.ts'), ...names.keys()], {
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es2023.d.ts', 'lib.esnext.disposable.d.ts'],
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    moduleDetection: ts.ModuleDetectionKind.Force,
    strict: true,
    noUncheckedIndexedAccess: true,
    exactOptionalPropertyTypes: true,
    allowSyntheticDefaultImports: true,
    allowJs: true,
    checkJs: true,
    skipLibCheck: true,
    noEmit: true,
    types: ['node'],
    typeRoots: [join(root, 'node_modules', '@types')],
    paths: {
      fencelock: [join(src, 'index.ts')],
      ...Object.fromEntries(SUBPATHS.map((p) => [`fencelock/${p}`, [join(src, 'backends', p, 'index.ts')]])),
    },
  })
  const problems = ts
    .getPreEmitDiagnostics(program)
    .filter(
      (d) => d.file === undefined || names.has(d.file.fileName) || d.file.fileName.endsWith('given.d.ts'),
    )
    .map((d) => {
      const message = ts.flattenDiagnosticMessageText(d.messageText, '\n')
      if (!d.file || d.start === undefined) return message
      const { line } = d.file.getLineAndCharacterOfPosition(d.start)
      const where = names.get(d.file.fileName) ?? d.file.fileName
      return `${where} (+${line + 1}): ${message}`
    })
  assert.deepEqual(problems, [])
})
