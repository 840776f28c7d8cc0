/**
 * The Redis backend's layout, read from its own sources: everything of the mutex sits in mutex/, of the
 * election in election/, of the read-write lock in rwlock/, and the files beside those folders (what every
 * primitive shares) import nothing from them, so a new primitive is a folder of its own and a field in the
 * shell. And a Redlock node's
 * request reaches its script typed: the sources cast no request, and the compiler refuses a node attempt
 * without the engine's request.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'
import type { LineBackend } from '../../../src/backends/redlock/line.js'

// Tests run from build/test/backends/redis; the sources sit at the repository root.
const src = fileURLToPath(new URL('../../../../src/', import.meta.url))
const redis = join(src, 'backends/redis')

/** The .ts files of `dir` (relative to src/), with the files their relative imports name. */
function sources(dir: string): Array<{ file: string; text: string; imports: string[] }> {
  return readdirSync(join(src, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => {
      const path = join(entry.parentPath, entry.name)
      const text = readFileSync(path, 'utf8')
      const imports = [...text.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+'(\.[^']+)'/g)].map((m) =>
        relative(src, resolve(dirname(path), m[1]!)),
      )
      return { file: relative(src, path), text, imports }
    })
}

it('the Redis election keeps its scripts, key names and facet in election/', () => {
  const election = readdirSync(join(redis, 'election')).sort()
  assert.deepEqual(election, ['facet.ts', 'layout.ts', 'scripts.ts'])
})

it('the Redis read-write lock keeps its scripts, key names and facet in rwlock/', () => {
  const rwlock = readdirSync(join(redis, 'rwlock')).sort()
  assert.deepEqual(rwlock, ['facet.ts', 'layout.ts', 'scripts.ts'])
})

it('the Redis mutex keeps its scripts, key names, modes and listing in mutex/', () => {
  const mutex = readdirSync(join(redis, 'mutex')).sort()
  for (const file of ['facet.ts', 'fair.ts', 'layout.ts', 'listing.ts', 'plain.ts', 'scripts.ts']) {
    assert.ok(mutex.includes(file), `src/backends/redis/mutex/${file} is missing (found ${mutex.join(', ')})`)
  }
})

it("the Redis backend's shared files import no primitive's folder (the shell and the entry aside)", () => {
  const shells = new Set(['backends/redis/shell.ts', 'backends/redis/index.ts'])
  // A primitive's folder may reuse another's algorithms (the election mints with the mutex's MINT).
  const primitive = /^backends\/redis\/[^/]+\//
  const found = sources('backends/redis')
    .filter(({ file }) => !primitive.test(file) && !shells.has(file))
    .flatMap(({ file, imports }) =>
      imports.filter((target) => primitive.test(target)).map((t) => `${file} -> ${t}`),
    )
  assert.ok(sources('backends/redis').length > 5, 'found no Redis sources')
  assert.deepEqual(found, [], `what every primitive shares must not depend on one:\n${found.join('\n')}`)
})

it('no request is cast on its way to a Redis or Redlock script', () => {
  const casts = [...sources('backends/redis'), ...sources('backends/redlock')].flatMap(({ file, text }) =>
    [...text.matchAll(/\bas\s+(?:NodeRequest|AcquireRequest)\b/g)].map((m) => `${file}: ${m[0]}`),
  )
  assert.deepEqual(casts, [], `requests cast:\n${casts.join('\n')}`)
})

/**
 * Never called, only compiled: a node's attempt takes the engine's request (its waiter, ticket and
 * liveness go to the node's line script), so a bare AcquireRequest does not compile.
 */
export function nodeAttemptNeedsTheEnginesRequest(backend: LineBackend, signal: AbortSignal): void {
  // @ts-expect-error the waiter, ticket and liveness the node's line needs are missing
  void backend.tryAcquire({ key: 'k', owner: 'o', ttlMs: 1000 }, signal)
}
