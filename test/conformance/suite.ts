import { randomBytes } from 'node:crypto'
import { after, afterEach, before, describe, it } from 'node:test'
import { createLockClient, type LockClient } from '../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../src/schemes.js'
import type { Kit, KitStore } from '../kits/kit.js'
import { abandonCases } from './cases/abandon.js'
import { capabilityCases } from './cases/capabilities.js'
import { crossProcessCases } from './cases/cross-process.js'
import { durableCases } from './cases/durable.js'
import { exclusivityCases } from './cases/exclusivity.js'
import { fenceCases } from './cases/fences.js'
import { fifoCases } from './cases/fifo.js'
import { holderCases } from './cases/holder.js'
import { inspectCases } from './cases/inspect.js'
import { keyCases } from './cases/keys.js'
import { lossCases } from './cases/loss.js'
import { lostReplyCases } from './cases/lost-replies.js'
import { operationCases } from './cases/operations.js'
import { sessionCases } from './cases/session.js'
import { waitingCases } from './cases/waiting.js'
import type { CaseContext, ConformanceCase } from './harness.js'

/**
 * The contract every backend must honour: exclusivity, timeouts, abort, release idempotence, loss, lost
 * replies on extend and release, abandonment, holder descriptions, the shape of inspect, cross-process use, validity bounds,
 * fences, key names, wake-up, and where the backend has them, FIFO order, session loss and durable fences.
 * The durable case restarts the store, so it comes last.
 */
export const CASES: readonly ConformanceCase[] = [
  ...capabilityCases,
  ...exclusivityCases,
  ...waitingCases,
  ...lossCases,
  ...lostReplyCases,
  ...fenceCases,
  ...keyCases,
  ...abandonCases,
  ...holderCases,
  ...inspectCases,
  ...operationCases,
  ...crossProcessCases,
  ...fifoCases,
  ...sessionCases,
  ...durableCases,
]

/** One cell of the matrix: a case runs on a kit, or is skipped with the reason. */
export type PlanRow =
  | { readonly case: string; readonly runs: true }
  | { readonly case: string; readonly skip: string }

/** What the suite does on `kit`: every case, run where the kit has what it requires, else skipped saying why. */
export function planFor(kit: Kit): PlanRow[] {
  return CASES.map((c) => {
    const missing = (c.requires ?? []).filter((flag) => !kit.capabilities[flag])
    if (missing.length === 0) return { case: c.name, runs: true }
    const why = missing.map((flag) => `${flag} (${kit.lacks[flag] ?? 'no reason given'})`)
    return { case: c.name, skip: `not applicable: ${why.join('; ')}` }
  })
}

/**
 * Set by the meta-test: the suite prints its plan (one JSON line per kit) instead of running, so the meta-test
 * sees which kits each conformance entry really runs, and how.
 */
export const PLAN_ONLY = 'FENCELOCK_CONFORMANCE_PLAN'

/** Runs the shared suite on `kit`: starts its store, runs the cases its capabilities allow, skips the others saying why. */
export function defineConformanceSuite(kit: Kit): void {
  if (process.env[PLAN_ONLY]) {
    process.stdout.write(`${JSON.stringify({ kit: kit.id, rows: planFor(kit) })}\n`)
    return
  }
  // A guard against a hang, not a speed goal: GCS on a loaded machine takes about 5 minutes (a new key's
  // first grant on the conditional-write stores waits for the store's clock to tick twice).
  describe(`conformance: ${kit.title}`, { timeout: 900_000 }, () => {
    const open: LockClient[] = []
    const run = randomBytes(4).toString('hex')
    let store: KitStore | undefined
    const ctx: CaseContext = {
      kit,
      store() {
        if (!store) throw new Error(`${kit.id}: the store is not started`)
        return store
      },
      ttl: (times) => times * kit.capabilities.minTtlMs,
      client(options, backend) {
        const client = createLockClient(backend ?? ctx.store().url(), options)
        open.push(client)
        return client
      },
      backend: async () => loadBackend(parseBackendUrl(ctx.store().url())),
      key: (label) => `conformance:${run}:${label}:${randomBytes(3).toString('hex')}`,
    }
    before(async () => {
      store = await kit.start()
    })
    afterEach(async () => {
      await Promise.all(open.splice(0).map((c) => c.close()))
    })
    after(async () => store?.close())
    for (const row of planFor(kit)) {
      const c = CASES.find((x) => x.name === row.case)!
      if ('skip' in row) it(c.name, { skip: row.skip }, () => {})
      else it(c.name, () => c.run(ctx))
    }
  })
}
