/**
 * The conformance matrix, checked whole: every backend folder has a kit, every kit is run by its entry,
 * every case is in every kit's plan (run where the kit's capabilities allow it, else skipped saying which
 * capability is missing and why), and every case runs somewhere. The entries are asked for their plans by
 * running them with FENCELOCK_CONFORMANCE_PLAN set (they print it instead of running the suite).
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync, readdirSync } from 'node:fs'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { KITS } from '../kits/index.js'
import { FLAGS, type Kit } from '../kits/kit.js'
import { CASES, PLAN_ONLY, type PlanRow, planFor } from './suite.js'

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

it('every kit runs every case its capabilities allow, and skips the others saying why', () => {
  const names = CASES.map((c) => c.name)
  assert.equal(new Set(names).size, names.length, 'two cases share a name')
  for (const kit of KITS) {
    const plan = planFor(kit)
    assert.deepEqual(
      plan.map((row) => row.case),
      names,
      `${kit.id}: the plan leaves cases out`,
    )
    for (const [i, row] of plan.entries()) {
      const missing = (CASES[i]!.requires ?? []).filter((flag) => !kit.capabilities[flag])
      if (missing.length === 0) assert.ok('runs' in row, `${kit.id} skips "${row.case}" that it can run`)
      else {
        assert.ok('skip' in row, `${kit.id} runs "${row.case}" without ${missing}`)
        for (const flag of missing) assert.ok(row.skip.includes(`${flag} (${kit.lacks[flag]})`), row.skip)
      }
    }
  }
  // A case that no kit runs tests nothing.
  const idle = CASES.filter((c) => KITS.every((kit) => (c.requires ?? []).some((f) => !kit.capabilities[f])))
  assert.deepEqual(
    idle.map((c) => c.name),
    [],
    'cases no kit runs',
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
