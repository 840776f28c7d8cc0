import { randomBytes } from 'node:crypto'
import { after, afterEach, before, describe } from 'node:test'
import type { ClientOptions, LockClient } from '../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../src/schemes.js'
import { abandonCases } from './cases/abandon.js'
import { crossProcessCases } from './cases/cross-process.js'
import { exclusivityCases } from './cases/exclusivity.js'
import { fenceCases } from './cases/fences.js'
import { holderCases } from './cases/holder.js'
import { keyCases } from './cases/keys.js'
import { lossCases } from './cases/loss.js'
import { waitingCases } from './cases/waiting.js'
import type { CaseContext, ConformanceHarness } from './harness.js'

export type { ConformanceHarness } from './harness.js'

/**
 * The contract every backend must honour, as one suite: exclusivity, timeouts, abort, release idempotence,
 * loss, abandonment, holder descriptions, cross-process use, validity bounds, fences, key names and wake-up.
 */
export function defineConformanceSuite(harness: ConformanceHarness): void {
  describe(`conformance: ${harness.name}`, { timeout: 300_000 }, () => {
    const open: LockClient[] = []
    const run = randomBytes(4).toString('hex')
    const ctx: CaseContext = {
      harness,
      client(options?: ClientOptions) {
        const client = harness.createClient(options)
        open.push(client)
        return client
      },
      async backend() {
        if (harness.createBackend) return harness.createBackend()
        if (!harness.url) throw new Error(`${harness.name}: give the harness a url or createBackend`)
        return loadBackend(parseBackendUrl(harness.url()))
      },
      key: (label) => `conformance:${run}:${label}:${randomBytes(3).toString('hex')}`,
    }
    before(async () => harness.setup?.())
    afterEach(async () => {
      await Promise.all(open.splice(0).map((c) => c.close()))
    })
    after(async () => harness.teardown?.())

    exclusivityCases(ctx)
    waitingCases(ctx)
    lossCases(ctx)
    fenceCases(ctx)
    keyCases(ctx)
    abandonCases(ctx)
    holderCases(ctx)
    const { url } = harness
    if (url !== undefined) crossProcessCases(ctx, url)
  })
}
