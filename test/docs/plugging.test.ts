/**
 * One way of plugging a backend, read from the sources: each backend's index.ts gets its backend object
 * from its engine's factory (an exported function of src/engines/<engine>/backend.ts returning a
 * LockBackend, imported from there), or, for the stores on no engine (memory, file, Redis), builds it in
 * its own folder: the shell. Never a class that forwards the contract to an engine method by method, nor
 * `Object.assign` onto an instance with `declare` lines for the methods it adds.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'

// Tests run from build/test/docs; the sources sit at the repository root.
const src = fileURLToPath(new URL('../../../src/', import.meta.url))

/** The stores on no engine, and what builds their object in their folder. */
const SHELLS: Record<string, RegExp> = {
  memory: /\.\.\.shell,/,
  file: /\.\.\.shell,/,
  redis: /new RedisLockBackend\(/,
}

const folders = (dir: string) =>
  readdirSync(join(src, dir), { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)

/** Every engine factory: `{ engine, name }` of each exported function of a backend.ts returning a LockBackend. */
function engineFactories(): Array<{ engine: string; name: string }> {
  return folders('engines').flatMap((engine) => {
    let text: string
    try {
      text = readFileSync(join(src, 'engines', engine, 'backend.ts'), 'utf8')
    } catch {
      return []
    }
    return [...text.matchAll(/export function (\w+)\s*(?:<[^(]*>)?\([\s\S]*?\):\s*LockBackend\s*\{/g)].map(
      (m) => ({ engine, name: m[1]! }),
    )
  })
}

/**
 * Where `text` plugs by hand: a class that implements the backend contract or forwards two or more methods
 * to the same-named method of a field (`tryAcquire(...) { return this.#engine.tryAcquire(...) }`), and
 * `Object.assign` onto `this` or `declare` lines. Each finding names the class or the line.
 */
function handPlugged(text: string): string[] {
  const found: string[] = []
  for (const m of text.matchAll(/class (\w+)[^{]*\{/g)) {
    const name = m[1]!
    const head = m[0]
    const body = classBody(text, m.index! + head.length)
    if (/implements[^{]*\b(LockBackend|LeaseFacet)\b/.test(head))
      found.push(`class ${name} implements the contract`)
    const forwards = [
      ...body.matchAll(
        /^\s*(?:async\s+)?(\w+)\s*\([^)]*\)[^{\n]*\{\s*return (?:await )?this\.#?\w+\.(\w+)\(/gm,
      ),
      ...body.matchAll(/^\s*(?:readonly\s+)?(\w+)\s*=\s*\([^)]*\)[^=\n]*=>\s*this\.#?\w+\.(\w+)\(/gm),
    ].filter((f) => f[1] === f[2])
    if (forwards.length >= 2) {
      found.push(`class ${name} forwards ${forwards.map((f) => f[1]).join(', ')} method by method`)
    }
  }
  // Over lines: the call may break after its parenthesis.
  if (/Object\.assign\(\s*this\b/.test(text)) found.push('Object.assign(this, …)')
  for (const line of text.split('\n')) {
    if (/^\s*declare\s+(readonly\s+)?\w+\s*:/.test(line)) found.push(line.trim())
  }
  return found
}

/** The text of the class body opening at `from` (just after its `{`), up to its matching `}`. */
function classBody(text: string, from: number): string {
  let depth = 1
  for (let i = from; i < text.length; i++) {
    if (text[i] === '{') depth++
    else if (text[i] === '}' && --depth === 0) return text.slice(from, i)
  }
  return text.slice(from)
}

it("each backend's index.ts gets its object from its engine's factory, or from its own shell", () => {
  const factories = engineFactories()
  assert.ok(
    factories.length >= 4,
    `found only ${factories.map((f) => f.name).join(', ')} as engine factories`,
  )
  const wrong: string[] = []
  for (const backend of folders('backends')) {
    const index = readFileSync(join(src, 'backends', backend, 'index.ts'), 'utf8')
    const used = factories.filter(
      ({ engine, name }) =>
        new RegExp(`\\b${name}\\(`).test(index) &&
        new RegExp(
          `import \\{[^}]*\\b${name}\\b[^}]*\\} from '\\.\\./\\.\\./engines/${engine}/backend\\.js'`,
        ).test(index),
    )
    const shell = SHELLS[backend]
    if (shell === undefined && used.length === 0) {
      wrong.push(`${backend}: index.ts calls no engine factory (${factories.map((f) => f.name).join(', ')})`)
    }
    if (shell !== undefined && !shell.test(index)) {
      wrong.push(`${backend}: index.ts does not build its object from its shell (${shell})`)
    }
  }
  assert.deepEqual(wrong, [], wrong.join('\n'))
})

it('no backend plugs by hand: no forwarding class, no Object.assign with declare lines', () => {
  const found: string[] = []
  for (const entry of readdirSync(join(src, 'backends'), { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue
    const path = join(entry.parentPath, entry.name)
    for (const finding of handPlugged(readFileSync(path, 'utf8'))) {
      found.push(`${path.slice(src.length)}: ${finding}`)
    }
  }
  assert.deepEqual(found, [], `plugged by hand (use the engine's factory):\n${found.join('\n')}`)
})

it('the check finds the forms it forbids', () => {
  const forwarding = `class EtcdBackend implements LockBackend {
  readonly #engine: Engine
  tryAcquire(request: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    return this.#engine.tryAcquire(request, signal)
  }
  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal) {
    return await this.#engine.extend(lease, ttlMs, signal)
  }
}`
  assert.deepEqual(handPlugged(forwarding), [
    'class EtcdBackend implements the contract',
    'class EtcdBackend forwards tryAcquire, extend method by method',
  ])
  const quiet = forwarding.replace(' implements LockBackend', '')
  assert.deepEqual(handPlugged(quiet), ['class EtcdBackend forwards tryAcquire, extend method by method'])
  const assigned = `class ZkBackend {
  constructor(engine: Engine) {
    Object.assign(
      this,
      queuePrimitives(engine),
    )
  }
  declare readonly tryAcquire: QueueBackendMethods['tryAcquire']
}`
  assert.deepEqual(handPlugged(assigned), [
    'Object.assign(this, …)',
    "declare readonly tryAcquire: QueueBackendMethods['tryAcquire']",
  ])
})
