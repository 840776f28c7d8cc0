/**
 * The layering CONTRIBUTING.md promises, read from the sources' own imports: the core imports no engine,
 * no backend and not the scheme table; an engine imports only the core and other engines; a backend never
 * imports another backend, except Redlock, which is built from Redis nodes; a fence guard imports
 * only other guards.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'

// Tests run from build/test/docs; the sources sit at the repository root.
const src = fileURLToPath(new URL('../../../src/', import.meta.url))

/** Every .ts file under `dir`, with the files its relative imports name (resolved, relative to src/). */
function importsUnder(dir: string): Array<{ file: string; imports: string[] }> {
  const out: Array<{ file: string; imports: string[] }> = []
  for (const entry of readdirSync(join(src, dir), { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue
    const path = join(entry.parentPath, entry.name)
    const text = readFileSync(path, 'utf8')
    const imports = [...text.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+'(\.[^']+)'/g)].map((m) =>
      relative(src, resolve(dirname(path), m[1]!)),
    )
    out.push({ file: relative(src, path), imports })
  }
  return out
}

const offending = (dir: string, allowed: (target: string, file: string) => boolean) =>
  importsUnder(dir).flatMap(({ file, imports }) =>
    imports.filter((target) => !allowed(target, file)).map((target) => `${file} -> ${target}`),
  )

it('src/core imports nothing outside src/core', () => {
  const found = offending('core', (target) => target.startsWith('core/'))
  assert.ok(importsUnder('core').length > 5, 'found no core sources')
  assert.deepEqual(
    found,
    [],
    `the core must not know engines, backends or the scheme table:\n${found.join('\n')}`,
  )
})

it('src/engines imports only the core and other engines', () => {
  const found = offending('engines', (target) => target.startsWith('core/') || target.startsWith('engines/'))
  assert.ok(importsUnder('engines').length > 0, 'found no engine sources')
  assert.deepEqual(found, [], `an engine must not know a backend:\n${found.join('\n')}`)
})

it('a backend imports no other backend (Redlock aside: it is built from Redis nodes)', () => {
  const found = offending('backends', (target, file) => {
    if (!target.startsWith('backends/')) return true
    const [, own] = file.split('/')
    const [, other] = target.split('/')
    return own === other || (own === 'redlock' && other === 'redis')
  })
  assert.deepEqual(found, [], `backends importing each other:\n${found.join('\n')}`)
})

it('src/guards imports only other guards: a guard works with any lock, and loads no backend', () => {
  const found = offending('guards', (target) => target.startsWith('guards/'))
  assert.ok(importsUnder('guards').length > 3, 'found no guard sources')
  assert.deepEqual(found, [], `a guard importing outside src/guards:\n${found.join('\n')}`)
})

it('src/otel imports only the core (the only place that imports @opentelemetry/api)', () => {
  const found = offending('otel', (target) => target.startsWith('core/') || target.startsWith('otel/'))
  assert.deepEqual(found, [], `the OpenTelemetry entry must stay beside the backends:\n${found.join('\n')}`)
  const others = ['core', 'engines', 'backends', 'cli'].flatMap((dir) =>
    importsUnder(dir)
      .filter(({ file }) => readFileSync(join(src, file), 'utf8').includes("'@opentelemetry/"))
      .map(({ file }) => file),
  )
  assert.deepEqual(others, [], 'only src/otel may import @opentelemetry packages')
})
