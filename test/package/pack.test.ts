/**
 * What a new user gets from npm: the repository is packed as `npm publish` would (its `prepack` cleans
 * and builds `dist`), the tarball is installed into a fresh ESM project without the network, and that
 * project runs the quickstart, compiles against the shipped types under the strictest settings, and runs
 * the CLI. Consumers under each TypeScript module setting (`node10`, `node16` CommonJS and ESM, `nodenext`
 * CommonJS, `bundler`) compile against every entry point in one `tsc -b`, and their output runs; a plain
 * CommonJS file loads every entry point with `require()` (docs/install.md says what each setting needs).
 *
 * The pack runs in a copy of the sources, never in the working tree: its `prepack` deletes `dist`, which
 * other tests (the quickstart's self-import) read while this one runs.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { delimiter, dirname, join, posix } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { tempDir } from '../support/temp.js'

/** The repository: the nearest folder above this file whose package.json is fencelock's (tests run from build/). */
function findRoot(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, 'package.json')
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, 'utf8')).name === 'fencelock') return dir
  }
  throw new Error(`no fencelock package.json above ${fileURLToPath(import.meta.url)}`)
}

const root = findRoot()
const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  files: string[]
  bin: Record<string, string>
  exports: Record<string, string | ExportTarget>
  typesVersions: Record<string, Record<string, string[]>>
  dependencies?: Record<string, string>
  peerDependenciesMeta: Record<string, { optional?: boolean }>
}

/** One entry point of package.json's `exports`: `require` gets CommonJS-flavoured types (see below). */
interface ExportTarget {
  readonly require: { readonly types: string; readonly default: string }
  readonly types: string
  readonly default: string
}

/** The entry points besides the root, by subpath (`redis`, `guards/http`, …). */
const entryIds = Object.keys(manifest.exports)
  .filter((subpath) => subpath !== '.' && subpath !== './package.json')
  .map((subpath) => subpath.slice(2))
/** The backends' entry points, each exporting `<id>Backend`. */
const backendIds = entryIds.filter((id) => {
  const target = manifest.exports[`./${id}`]
  return typeof target !== 'string' && target?.default.startsWith('./dist/backends/')
})
/** The others (fence guards, OpenTelemetry): their declarations must resolve under every setting too. */
const otherIds = entryIds.filter((id) => !backendIds.includes(id))

/**
 * The environment of every child: the node running this test first on PATH, so that npm, npx and the
 * `fencelock` bin (all `#!/usr/bin/env node`) run on it, and no lifecycle variables of an enclosing
 * `npm test` (they describe another package).
 */
const env: NodeJS.ProcessEnv = Object.fromEntries(
  Object.entries({
    ...process.env,
    PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}`,
    npm_config_update_notifier: 'false',
  }).filter(([name]) => !/^npm_(lifecycle|package)_/.test(name)),
)

interface Result {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

function run(command: string, args: readonly string[], cwd: string): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk) => {
      stdout += chunk
    })
    child.stderr.on('data', (chunk) => {
      stderr += chunk
    })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
  })
}

async function ok(command: string, args: readonly string[], cwd: string): Promise<string> {
  const result = await run(command, args, cwd)
  assert.equal(result.code, 0, `${command} ${args.join(' ')} failed:\n${result.stdout}\n${result.stderr}`)
  return result.stdout
}

/** The README's quickstart in plain JavaScript, with try/finally where Node 20 has no `await using`. */
const QUICKSTART_JS = `import { createLockClient } from 'fencelock'

const locks = createLockClient(process.argv[2], { ttl: '15s' })

const lock = await locks.acquire('reports:nightly', { timeout: '10s' })
try {
  console.log(\`holding \${lock.key} with fence \${lock.fence}\`)
} finally {
  await lock.release()
}

const maybe = await locks.tryAcquire('jobs:42') // null when held elsewhere
console.log(maybe ? 'got jobs:42' : 'jobs:42 is busy')
await maybe?.release()

const summary = await locks.withLock('jobs:42', async (lock) => \`ran under fence \${lock.fence}\`)
console.log(summary)
console.log(await locks.inspect('jobs:42'))
await locks.close()
`

/** A consumer under the strictest settings: explicit `undefined` for options, `error.code` narrowed. */
const STRICT_TS = `import {
  type AcquireOptions,
  type ClientOptions,
  createLockClient,
  type FencelockErrorCode,
  LockError,
  LockNotAcquiredError,
} from 'fencelock'
import { type FileBackendOptions, fileBackend } from 'fencelock/file'
import { type MemoryBackendOptions, memoryBackend } from 'fencelock/memory'

// Code that forwards its own optional settings passes \`undefined\` for the ones it was not given.
const ttl: string | undefined = process.env.LOCK_TTL
const clientOptions: ClientOptions = { ttl, timeout: undefined, renew: undefined, driftFactor: undefined }
const fileOptions: FileBackendOptions = { dir: process.argv[2] ?? '.', fsync: undefined, unreadableHoldMs: undefined }
const memoryOptions: MemoryBackendOptions = { name: undefined }
const acquireOptions: AcquireOptions = { ttl: undefined, timeout: undefined, signal: undefined, renew: undefined }

const locks = createLockClient(fileBackend(fileOptions), clientOptions)
const memory = createLockClient(memoryBackend(memoryOptions), { ttl: undefined })
try {
  const lock = await locks.acquire('k', acquireOptions)
  const fence: bigint = lock.fence
  await lock.release()
  console.log(fence, (await memory.inspect('k', { signal: undefined })).held)
} catch (error) {
  if (error instanceof LockError && error.code === 'FENCELOCK_NOT_ACQUIRED') {
    const code: FencelockErrorCode = error.code
    console.log(code, error.key)
  }
  if (error instanceof LockNotAcquiredError) {
    const code: 'FENCELOCK_NOT_ACQUIRED' = error.code
    console.log(code)
  }
} finally {
  await locks.close()
  await memory.close()
}
`

/** The same check with a typo in the code: must not compile. */
const MISSPELLED_TS = `import { LockError } from 'fencelock'

export function isNotAcquired(error: unknown): boolean {
  return error instanceof LockError && error.code === 'FENCELOCK_NOT_ACQIURED'
}
`

/** `fencelock/otel` in a consumer that installed `@opentelemetry/api` and nothing else of OpenTelemetry. */
const OTEL_TS = `import { createLockClient } from 'fencelock'
import { type InstrumentOptions, instrument } from 'fencelock/otel'

const options: InstrumentOptions = {
  meterProvider: undefined,
  tracerProvider: undefined,
  recordKeys: (key: string) => key.split(':')[0],
}
const stop = instrument(options)
const locks = createLockClient(process.argv[2] ?? 'memory:')
await (await locks.acquire('jobs:1')).release()
stop()
await locks.close()
console.log('instrumented')
`

/** The folder of the `@opentelemetry/api` the tests use (its exports do not include package.json). */
function openTelemetryApi(): string {
  let dir = dirname(createRequire(import.meta.url).resolve('@opentelemetry/api'))
  while (!existsSync(join(dir, 'package.json')) || !dir.endsWith(join('@opentelemetry', 'api'))) {
    if (dir === dirname(dir)) throw new Error('@opentelemetry/api is not installed (a devDependency)')
    dir = dirname(dir)
  }
  return dir
}

function tsconfig(file: string): string {
  return JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      lib: ['ES2022'],
      module: 'nodenext',
      moduleResolution: 'nodenext',
      strict: true,
      exactOptionalPropertyTypes: true,
      noUncheckedIndexedAccess: true,
      // Our .d.ts files are checked too, under the same settings.
      skipLibCheck: false,
      noEmit: true,
      types: ['node'],
      // The repository's @types/node: the consumer installs nothing but the tarball.
      typeRoots: [join(root, 'node_modules', '@types')],
    },
    files: [file],
  })
}

/**
 * One consumer of every entry point, compiled under each TypeScript module setting and then run. The
 * backends' drivers are not installed: their types are skipped (`skipLibCheck`), and each factory call
 * below with a wrong argument must fail to compile, which it would not if the entry point's declarations
 * were not found (an unresolved import is `any`, and `@ts-expect-error` on a line without error is one).
 */
function matrixConsumer(): string {
  const imports = [
    ...backendIds.map((id) => `import { ${id}Backend } from 'fencelock/${id}'`),
    // Type-only: their peers (@opentelemetry/api, …) are not installed here, and TS2307 still tells.
    ...otherIds.map((id, i) => `import type * as entry${i} from 'fencelock/${id}'`),
  ].join('\n')
  const misuses = backendIds.map((id) => `  // @ts-expect-error: a number\n  ${id}Backend(42)`).join('\n')
  return `import { createLockClient, LockError } from 'fencelock'
${imports}

export type OtherEntries = [${otherIds.map((_, i) => `typeof entry${i}`).join(', ')}]

/** Never called: each line is a compile-time check (see the test). */
export async function declarationsWereFound(): Promise<void> {
${misuses}
  // @ts-expect-error: a fence is a bigint
  const fence: string = (await createLockClient(memoryBackend({})).acquire('k')).fence
  console.log(fence)
}

async function main(): Promise<void> {
  const locks = createLockClient(memoryBackend({}), { ttl: '15s' })
  const lock = await locks.acquire('k', { timeout: '10s' })
  const fence: bigint = lock.fence
  await lock.release()
  await locks.close()
  const factories = [${backendIds.map((id) => `${id}Backend`).join(', ')}]
  const loaded = factories.filter((factory) => typeof factory === 'function').length
  console.log(\`fence \${fence}, \${loaded} backends, \${new LockError('FENCELOCK_NOT_ACQUIRED', 'k') instanceof Error}\`)
}

main().catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
`
}

/** The TypeScript settings a consumer may use, each with its project's module format. */
const SETTINGS = [
  { name: 'node10', type: 'commonjs', module: 'commonjs', moduleResolution: 'node10' },
  { name: 'node16-cjs', type: 'commonjs', module: 'node16', moduleResolution: 'node16' },
  { name: 'node16-esm', type: 'module', module: 'node16', moduleResolution: 'node16' },
  { name: 'nodenext-cjs', type: 'commonjs', module: 'nodenext', moduleResolution: 'nodenext' },
  { name: 'bundler', type: 'module', module: 'esnext', moduleResolution: 'bundler' },
] as const

function matrixTsconfig(setting: (typeof SETTINGS)[number]): string {
  return JSON.stringify({
    compilerOptions: {
      target: 'ES2022',
      lib: ['ES2022'],
      module: setting.module,
      moduleResolution: setting.moduleResolution,
      strict: true,
      exactOptionalPropertyTypes: true,
      noUncheckedIndexedAccess: true,
      skipLibCheck: true,
      outDir: 'out',
      types: ['node'],
      typeRoots: [join(root, 'node_modules', '@types')],
    },
    files: ['consumer.ts'],
  })
}

/**
 * Plain CommonJS, no TypeScript: `require()` loads every entry point (Node ≥ 20.19 loads ES modules so),
 * and it is the very module `import()` loads: one copy of the error classes and of the named memory stores.
 */
function requireConsumer(): string {
  return `const assert = require('node:assert/strict')
const fencelock = require('fencelock')
const { memoryBackend } = require('fencelock/memory')
${backendIds.map((id) => `assert.equal(typeof require('fencelock/${id}').${id}Backend, 'function')`).join('\n')}

async function main() {
  const imported = await import('fencelock')
  assert.equal(fencelock.LockError, imported.LockError, 'require and import gave two copies')
  const { memoryBackend: importedMemory } = await import('fencelock/memory')
  const required = fencelock.createLockClient(memoryBackend({ name: 'shared' }), { ttl: '15s' })
  const viaImport = imported.createLockClient(importedMemory({ name: 'shared' }), { ttl: '15s' })
  const lock = await required.acquire('k')
  assert.equal(await viaImport.tryAcquire('k'), null, 'the memory store is not shared')
  await lock.release()
  await required.close()
  await viaImport.close()
  console.log('required ${backendIds.length + 1} entry points, one copy')
}
main().catch((error) => {
  console.error(error)
  process.exitCode = 1
})
`
}

describe('the packed package, installed in a new project', { timeout: 300_000 }, () => {
  const work = tempDir('pack')
  after(() => work.cleanup())
  const stage = join(work.path, 'stage')
  const consumer = join(work.path, 'consumer')
  let files: string[] = []
  let tarball = ''

  before(async () => {
    // What the build reads, and what `files` ships besides dist; dist comes from prepack.
    mkdirSync(stage)
    const sources = [
      'package.json',
      'tsconfig.base.json',
      'tsconfig.build.json',
      'src',
      'scripts/cjs-types.mjs',
      ...manifest.files,
    ]
    for (const name of new Set(sources.filter((f) => f !== 'dist'))) {
      cpSync(join(root, name), join(stage, name), { recursive: true })
    }
    symlinkSync(join(root, 'node_modules'), join(stage, 'node_modules'), 'dir')
    // A leftover of an earlier build: prepack must clean dist before building, or it would ship.
    mkdirSync(join(stage, 'dist', 'test'), { recursive: true })
    writeFileSync(join(stage, 'dist', 'test', 'stale.test.js'), '')

    const packed = JSON.parse(
      await ok('npm', ['pack', '--json', '--pack-destination', work.path], stage),
    ) as [{ filename: string; files: Array<{ path: string }> }]
    files = packed[0].files.map((f) => f.path)
    tarball = join(work.path, packed[0].filename)

    mkdirSync(consumer)
    writeFileSync(
      join(consumer, 'package.json'),
      JSON.stringify({ name: 'consumer', private: true, type: 'module' }),
    )
    // The tarball has no dependencies and only optional peers: nothing to fetch, so no network.
    await ok('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], consumer)
  })

  it('ships LICENSE, README.md, package.json and dist/**/*.js and .d.ts, and nothing else', () => {
    for (const name of ['LICENSE', 'README.md', 'package.json', 'dist/index.js', 'dist/index.d.ts']) {
      assert.ok(files.includes(name), `${name} is missing from the tarball`)
    }
    assert.match(readFileSync(join(consumer, 'node_modules/fencelock/LICENSE'), 'utf8'), /MIT License/)
    const leaves = (target: unknown): string[] =>
      typeof target === 'string' ? [target] : Object.values(target as object).flatMap(leaves)
    const targets = [...Object.values(manifest.bin), ...leaves(manifest.exports)]
    for (const target of targets) {
      assert.ok(files.includes(posix.normalize(target)), `${target} (package.json) is not in the tarball`)
    }
    const unexpected = files.filter(
      (f) =>
        !['LICENSE', 'README.md', 'package.json'].includes(f) &&
        !(f.startsWith('dist/') && /\.(d\.ts|d\.cts|js|map)$/.test(f)),
    )
    assert.deepEqual(unexpected, [], 'files that should not ship (stale build output?)')
  })

  it('ships no source map whose sources are missing', () => {
    for (const map of files.filter((f) => f.endsWith('.map'))) {
      const { sources } = JSON.parse(readFileSync(join(consumer, 'node_modules/fencelock', map), 'utf8')) as {
        sources: string[]
      }
      for (const source of sources) {
        const path = posix.join(posix.dirname(map), source)
        assert.ok(files.includes(path), `${map} points at ${path}, which does not ship`)
      }
    }
  })

  it('runs the quickstart in plain JavaScript', async () => {
    writeFileSync(join(consumer, 'quickstart.js'), QUICKSTART_JS)
    const locks = pathToFileURL(join(work.path, 'locks')).href
    const lines = (await ok(process.execPath, ['quickstart.js', locks], consumer)).trim().split('\n')
    assert.match(lines[0]!, /^holding reports:nightly with fence \d+$/)
    assert.equal(lines[1], 'got jobs:42')
    assert.match(lines[2]!, /^ran under fence \d+$/)
    assert.match(lines[3]!, /held: false/)
  })

  it('type-checks a strict consumer, and refuses a misspelled error code', async () => {
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
    writeFileSync(join(consumer, 'strict.ts'), STRICT_TS)
    writeFileSync(join(consumer, 'tsconfig.strict.json'), tsconfig('strict.ts'))
    writeFileSync(join(consumer, 'misspelled.ts'), MISSPELLED_TS)
    writeFileSync(join(consumer, 'tsconfig.misspelled.json'), tsconfig('misspelled.ts'))
    const [strict, misspelled] = await Promise.all([
      run(process.execPath, [tsc, '-p', 'tsconfig.strict.json'], consumer),
      run(process.execPath, [tsc, '-p', 'tsconfig.misspelled.json'], consumer),
    ])
    assert.equal(strict.code, 0, `the strict consumer does not compile:\n${strict.stdout}${strict.stderr}`)
    assert.notEqual(misspelled.code, 0, 'a misspelled error code compiled')
    // TS2367: "This comparison appears to be unintentional because the types … have no overlap".
    assert.match(misspelled.stdout, /misspelled\.ts\(4,\d+\): error TS2367: .*FENCELOCK_NOT_ACQIURED/)
  })

  it('gives require() CommonJS-flavoured types, and node10 every subpath (typesVersions)', () => {
    for (const [subpath, target] of Object.entries(manifest.exports)) {
      if (typeof target === 'string') continue
      assert.equal(target.require.default, target.default, `${subpath}: require must load the same file`)
      assert.equal(target.require.types, target.types.replace(/\.d\.ts$/, '.d.cts'), subpath)
      if (subpath !== '.') {
        assert.deepEqual(
          manifest.typesVersions['*']?.[subpath.slice(2)],
          [target.types],
          `typesVersions ${subpath}`,
        )
      }
    }
    // Every .d.ts has its .d.cts twin, whose relative imports name .cjs twins that ship.
    for (const file of files.filter((f) => f.endsWith('.d.ts'))) {
      const twin = file.replace(/\.d\.ts$/, '.d.cts')
      assert.ok(files.includes(twin), `${twin} is missing`)
      const text = readFileSync(join(consumer, 'node_modules/fencelock', twin), 'utf8')
      for (const [, specifier] of text.matchAll(/['"](\.{1,2}\/[^'"\n]+)['"]/g)) {
        const declaration = posix.join(posix.dirname(twin), specifier!.replace(/\.cjs$/, '.d.cts'))
        assert.ok(files.includes(declaration), `${twin} imports ${specifier}, which has no ${declaration}`)
      }
    }
  })

  it('compiles and runs a consumer of every entry point under each TypeScript module setting', async () => {
    const projects = SETTINGS.map((setting) => {
      const folder = join(consumer, 'matrix', setting.name)
      mkdirSync(folder, { recursive: true })
      writeFileSync(join(folder, 'package.json'), JSON.stringify({ private: true, type: setting.type }))
      writeFileSync(join(folder, 'tsconfig.json'), matrixTsconfig(setting))
      writeFileSync(join(folder, 'consumer.ts'), matrixConsumer())
      return folder
    })
    // One process for all: tsc -b parses @types/node and our declarations once for every project.
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
    const compiled = await run(process.execPath, [tsc, '-b', '--pretty', 'false', ...projects], consumer)
    assert.equal(compiled.code, 0, `a consumer does not compile:\n${compiled.stdout}${compiled.stderr}`)
    const outputs = await Promise.all(
      projects.map((folder) => ok(process.execPath, [join(folder, 'out', 'consumer.js')], folder)),
    )
    for (const [i, output] of outputs.entries()) {
      assert.match(
        output,
        new RegExp(`^fence \\d+, ${backendIds.length} backends, true$`, 'm'),
        SETTINGS[i]!.name,
      )
    }
  })

  it('loads every entry point with a plain require(), as the one copy import() loads', async () => {
    writeFileSync(join(consumer, 'required.cjs'), requireConsumer())
    const output = await ok(process.execPath, ['required.cjs'], consumer)
    assert.match(output, new RegExp(`^required ${backendIds.length + 1} entry points, one copy$`, 'm'))
  })

  it('has no dependencies; @opentelemetry/api is an optional peer of fencelock/otel alone', () => {
    assert.equal(manifest.dependencies, undefined, 'fencelock must install nothing')
    assert.equal(manifest.peerDependenciesMeta['@opentelemetry/api']?.optional, true)
    // The quickstart above ran in a consumer without @opentelemetry/api: the core never loads it.
    assert.equal(existsSync(join(consumer, 'node_modules', '@opentelemetry')), false)
  })

  it('runs and type-checks fencelock/otel once @opentelemetry/api is installed', async () => {
    // A consumer of its own, so the one above keeps proving that the core needs nothing.
    const otel = join(work.path, 'otel-consumer')
    mkdirSync(join(otel, 'node_modules', '@opentelemetry'), { recursive: true })
    writeFileSync(
      join(otel, 'package.json'),
      JSON.stringify({ name: 'otel-consumer', private: true, type: 'module' }),
    )
    // A copy, not a link: Node and tsc resolve a package's imports from its real folder.
    cpSync(join(consumer, 'node_modules', 'fencelock'), join(otel, 'node_modules', 'fencelock'), {
      recursive: true,
    })
    symlinkSync(openTelemetryApi(), join(otel, 'node_modules', '@opentelemetry', 'api'), 'dir')
    writeFileSync(join(otel, 'otel.ts'), OTEL_TS)
    writeFileSync(join(otel, 'tsconfig.json'), tsconfig('otel.ts'))
    // The same program without its types, as Node 20 runs it.
    writeFileSync(
      join(otel, 'otel.js'),
      OTEL_TS.replace('type InstrumentOptions, ', '')
        .replace('const options: InstrumentOptions', 'const options')
        .replace('(key: string)', '(key)'),
    )
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
    const checked = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], otel)
    assert.equal(
      checked.code,
      0,
      `the fencelock/otel consumer does not compile:\n${checked.stdout}${checked.stderr}`,
    )
    assert.equal((await ok(process.execPath, ['otel.js'], otel)).trim(), 'instrumented')
  })

  it('runs the fencelock CLI through npx', async () => {
    const result = await run('npx', ['--offline', 'fencelock', '--help'], consumer)
    assert.equal(result.code, 0, result.stderr)
    assert.match(result.stdout, /^Usage: fencelock /m)
  })
})
