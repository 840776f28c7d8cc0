/**
 * The conformance matrix, checked whole: every backend folder has a kit, every kit declares its primitives and
 * is run by its entry, every case of a declared primitive is in the kit's plan (run where the kit's
 * capabilities allow it, else skipped saying which capability is missing and why), a primitive the kit does
 * not declare gets only its refusal case, and every case runs somewhere. The entries are asked for their plans by
 * running them with FENCELOCK_CONFORMANCE_PLAN set (they print it instead of running the suite).
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { memoryBackend } from '../../src/backends/memory/index.js'
import { createLockClient, type LockBackend, type LockClient } from '../../src/index.js'
import { KITS } from '../kits/index.js'
import { FLAGS, type Kit, PRIMITIVES } from '../kits/kit.js'
import type { CaseContext, ConformanceCase } from './harness.js'
import { CASES, PLAN_ONLY, type PlanRow, planFor, refusalCase, refusalCaseName } from './suite.js'

// Tests run from build/test/conformance; the sources sit at the repository root.
const root = fileURLToPath(new URL('../../../', import.meta.url))
const entryFile = (entry: string) => fileURLToPath(new URL(`../backends/${entry}.test.js`, import.meta.url))

it('every backend folder has a kit, and every kit names a backend folder', () => {
  const backends = readdirSync(`${root}src/backends`, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
  assert.ok(backends.length >= 2, `found no backends under ${root}src/backends`)
  const kitless = backends.filter((name) => !KITS.some((kit) => kit.backend === name))
  assert.deepEqual(kitless, [], `backends without a kit in test/kits/index.ts: ${kitless}`)
  for (const kit of KITS)
    assert.ok(backends.includes(kit.backend), `${kit.id}: no src/backends/${kit.backend}`)
  const ids = KITS.map((kit) => kit.id)
  assert.equal(new Set(ids).size, ids.length, `kit ids repeat: ${ids}`)
})

it('every kit says why each capability it lacks is off, and has a usable minimum ttl', () => {
  for (const kit of KITS) {
    for (const flag of FLAGS) {
      const why = kit.lacks[flag]
      if (kit.capabilities[flag])
        assert.equal(why, undefined, `${kit.id} has ${flag} and a reason it lacks it`)
      else assert.ok(why && why.length > 10, `${kit.id} lacks ${flag} without saying why`)
    }
    assert.ok(kit.capabilities.minTtlMs > 0 && Number.isInteger(kit.capabilities.minTtlMs), kit.id)
  }
})

it('every kit declares the primitives its backend offers, the mutex among them', () => {
  for (const kit of KITS) {
    assert.ok(Array.isArray(kit.primitives), `${kit.id} declares no primitives (Kit.primitives)`)
    assert.ok(kit.primitives.includes('mutex'), `${kit.id}: every backend offers the mutex`)
    const unknown = kit.primitives.filter((p) => !PRIMITIVES.includes(p))
    assert.deepEqual(unknown, [], `${kit.id} declares primitives that do not exist`)
    assert.equal(new Set(kit.primitives).size, kit.primitives.length, `${kit.id} declares a primitive twice`)
  }
})

it('every kit runs every case of its primitives that its capabilities allow, and skips the others saying why', () => {
  const names = PRIMITIVES.flatMap((p) => CASES[p].map((c) => c.name))
  assert.equal(new Set(names).size, names.length, 'two cases share a name')
  for (const kit of KITS) {
    const plan = planFor(kit)
    for (const primitive of PRIMITIVES) {
      const rows = plan.filter((row) => row.primitive === primitive)
      if (CASES[primitive].length === 0) assert.deepEqual(rows, [], `${kit.id}: ${primitive} has no cases`)
      else if (!kit.primitives.includes(primitive))
        assert.deepEqual(
          rows.map((row) => row.case),
          [refusalCaseName(primitive)],
          `${kit.id} lacks ${primitive}: only the refusal case`,
        )
      else {
        assert.deepEqual(
          rows.map((row) => row.case),
          CASES[primitive].map((c) => c.name),
          `${kit.id}: the ${primitive} plan leaves cases out`,
        )
        for (const [i, row] of rows.entries()) {
          const missing = (CASES[primitive][i]!.requires ?? []).filter((flag) => !kit.capabilities[flag])
          if (missing.length === 0) assert.ok('runs' in row, `${kit.id} skips "${row.case}" that it can run`)
          else {
            assert.ok('skip' in row, `${kit.id} runs "${row.case}" without ${missing}`)
            for (const flag of missing) assert.ok(row.skip.includes(`${flag} (${kit.lacks[flag]})`), row.skip)
          }
        }
      }
    }
  }
  // A case that no kit runs tests nothing.
  const idle = PRIMITIVES.flatMap((p) =>
    CASES[p].filter((c) =>
      KITS.every(
        (kit) => !kit.primitives.includes(p) || (c.requires ?? []).some((f) => !kit.capabilities[f]),
      ),
    ),
  )
  assert.deepEqual(
    idle.map((c) => c.name),
    [],
    'cases no kit runs',
  )
})

it("a primitive's cases run only on kits that declare it; the others get its refusal case", () => {
  const memory = { ...KITS.find((kit) => kit.id === 'memory')!, primitives: ['mutex'] as const }
  const elected: ConformanceCase = { name: 'election: one leader', run: async () => {} }
  const cases = { ...CASES, election: [elected] }
  const without = planFor(memory, cases).filter((row) => row.primitive === 'election')
  assert.deepEqual(without.length, 1)
  assert.equal(without[0]!.case, refusalCaseName('election'))
  assert.ok('runs' in without[0]!, 'the refusal case runs')
  const withIt = planFor({ ...memory, primitives: ['mutex', 'election'] }, cases)
  assert.deepEqual(
    withIt.filter((row) => row.primitive === 'election'),
    [{ primitive: 'election', case: elected.name, runs: true }],
  )
  assert.deepEqual(
    withIt.filter((row) => row.primitive === 'mutex'),
    planFor(memory).filter((row) => row.primitive === 'mutex'),
    'declaring another primitive leaves the mutex plan as it was',
  )
})

it('the election refusal case passes on a backend without the facet and fails on one with it', async () => {
  // Every kit declares election, so no entry runs this case: it is checked here on the memory backend,
  // once without its election facet (refused before any I/O) and once with it (the case must notice).
  const kit = KITS.find((k) => k.id === 'memory')!
  const refusal = refusalCase('election')
  assert.ok(refusal, 'the election refusal case exists')
  const run = async (make: () => LockBackend) => {
    const clients: LockClient[] = []
    const ctx: CaseContext = {
      kit,
      store: () => assert.fail('the refusal case needs no store'),
      ttl: (times) => times * kit.capabilities.minTtlMs,
      client: (options, backend) => {
        const client = createLockClient(backend ?? make(), options)
        clients.push(client)
        return client
      },
      backend: async () => make(),
      key: (label) => `meta-${label}`,
    }
    try {
      await refusal.run(ctx)
    } finally {
      await Promise.all(clients.map((c) => c.close()))
    }
  }
  const name = `meta-refusal-${process.pid}`
  await run(() => {
    const { election: _none, ...plain } = memoryBackend({ name })
    return { ...plain, id: 'memory:no-election' }
  })
  await assert.rejects(
    run(() => memoryBackend({ name })),
    'a backend that elects fails the refusal case',
  )
})

it('each conformance entry runs exactly its kits, with their plans', { timeout: 120_000 }, async () => {
  const entries = [...new Set(KITS.map((kit) => kit.entry))]
  const seen = new Map<string, { entry: string; rows: PlanRow[] }>()
  for (const entry of entries) {
    assert.ok(existsSync(entryFile(entry)), `no conformance entry test/backends/${entry}.test.ts`)
    const { stdout } = await promisify(execFile)(process.execPath, [entryFile(entry)], {
      env: { ...process.env, [PLAN_ONLY]: '1' },
    })
    for (const line of stdout.split('\n').filter(Boolean)) {
      const { kit, rows } = JSON.parse(line) as { kit: string; rows: PlanRow[] }
      assert.ok(!seen.has(kit), `kit ${kit} is run by ${seen.get(kit)?.entry} and ${entry}`)
      seen.set(kit, { entry, rows })
    }
  }
  for (const kit of KITS) {
    const found = seen.get(kit.id)
    assert.ok(found, `no entry runs kit ${kit.id} (expected test/backends/${kit.entry}.test.ts)`)
    assert.equal(found.entry, kit.entry, `kit ${kit.id} is run by ${found.entry}, not its entry ${kit.entry}`)
    assert.deepEqual(found.rows, planFor(kit as Kit), `${kit.id}: the entry's plan differs`)
  }
  assert.deepEqual(
    [...seen.keys()].sort(),
    KITS.map((kit) => kit.id).sort(),
    'entries run kits not in the index',
  )
})
