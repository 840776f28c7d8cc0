/**
 * Every ```ts and ```js block of README.md, CONTRIBUTING.md and docs/ compiles against the package's own
 * sources and the drivers' types, under the strict settings the package promises (`strict`,
 * `exactOptionalPropertyTypes`, `noUncheckedIndexedAccess`). A block may use the names a page sets up in
 * prose (`locks`, `lock`, `sql`, `pool`, `redis`, `body`…): they are declared once below, and a block's own declarations shadow them.
 * The README's quickstart is also run (test/examples.test.ts).
 */
import assert from 'node:assert/strict'
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { it } from 'node:test'
import ts from 'typescript'
import { codeBlocks, pages, root } from './pages.js'

/** What a block may take as given: the objects the pages build in an earlier block or in prose. */
const GIVEN = `import type { Lock, LockClient } from 'fencelock'
import type { Sql } from 'postgres'
import type { Pool } from 'mysql2/promise'
import type { Redis } from 'ioredis'
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb'
declare global {
  const locks: LockClient
  const lock: Lock
  const sql: Sql
  const pool: Pool
  const redis: Redis
  const dynamo: DynamoDBClient
  const body: string
  const flags: Record<string, unknown>
  function saveReport(from: unknown): Promise<void>
}
export {}
`

/** Every entry of package.json's exports, as the source file it is built from (`fencelock/redis` → src). */
function entryPaths(): Record<string, string[]> {
  const { exports } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    exports: Record<string, string | { default?: string }>
  }
  const paths: Record<string, string[]> = {}
  for (const [entry, target] of Object.entries(exports)) {
    const built = typeof target === 'string' ? target : target.default
    if (!built?.startsWith('./dist/') || !built.endsWith('.js')) continue
    const name = entry === '.' ? 'fencelock' : `fencelock/${entry.slice(2)}`
    paths[name] = [join(root, 'src', built.slice('./dist/'.length).replace(/\.js$/, '.ts'))]
  }
  return paths
}

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
    paths: entryPaths(),
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
