/**
 * Compiles code samples (the docs' code blocks, the doc comments' `@example`s) against the package's own
 * sources under the strict settings it promises, and lists the package's public entry points from the
 * `exports` map of package.json, so a new subpath is covered by every check without editing one.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import ts from 'typescript'
import { root } from './pages.js'

export interface EntryPoint {
  /** What a user imports: `fencelock`, `fencelock/redis`. */
  readonly specifier: string
  /** Its source file, absolute. */
  readonly source: string
}

/** Every entry of package.json's `exports` with types, mapped from dist/*.d.ts back to src/*.ts. */
export function entryPoints(): EntryPoint[] {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    name: string
    exports: Record<string, string | { types?: string }>
  }
  const entries: EntryPoint[] = []
  for (const [subpath, target] of Object.entries(pkg.exports)) {
    if (typeof target === 'string' || target.types === undefined) continue
    const source = /^\.\/dist\/(.+)\.d\.ts$/.exec(target.types)
    if (!source) throw new Error(`package.json exports ${subpath}: types ${target.types} is not under ./dist`)
    entries.push({
      specifier: subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`,
      source: join(root, 'src', `${source[1]}.ts`),
    })
  }
  return entries
}

/**
 * What a sample may take as given: the objects the pages build in an earlier block or in prose, and the
 * lock a method's example runs on. A sample's own declarations shadow them.
 */
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

export interface Sample {
  /** Where it comes from, for the error messages: `docs/api.md:12`, `fencelock/redis redisBackend`. */
  readonly where: string
  readonly code: string
  readonly lang: 'ts' | 'js'
}

/** Compiles the samples together; returns one message per error, naming the sample and its line. */
export function compileSamples(samples: readonly Sample[], folder: string): string[] {
  const dir = join(root, 'build', folder)
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir, { recursive: true })
  writeFileSync(join(dir, 'given.d.ts'), GIVEN)
  const names = new Map<string, string>()
  for (const [i, sample] of samples.entries()) {
    const name = join(dir, `${sample.where.replace(/[^A-Za-z0-9]+/g, '_')}-${i}.${sample.lang}`)
    writeFileSync(name, sample.code)
    names.set(name, sample.where)
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
    paths: Object.fromEntries(entryPoints().map((e) => [e.specifier, [e.source]])),
  })
  return ts
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
}
