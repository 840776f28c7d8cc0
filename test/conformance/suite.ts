import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, afterEach, before, describe, it } from 'node:test'
import { CapabilityError, createLockClient, type LockBackend, type LockClient } from '../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../src/schemes.js'
import { type Kit, type KitStore, PRIMITIVES, type Primitive } from '../kits/kit.js'
import { electionCases } from './cases/election/index.js'
import { atomicMultiKeyCases } from './cases/multi-key/atomic.js'
import { multiKeyCases } from './cases/multi-key/index.js'
import { mutexCases } from './cases/mutex/index.js'
import { resumeCases } from './cases/resume/index.js'
import { rwlockCases } from './cases/rwlock/index.js'
import { semaphoreCases } from './cases/semaphore/index.js'
import { slotsCases } from './cases/slots/index.js'
import type { CaseContext, ConformanceCase } from './harness.js'

/**
 * The contract, by primitive: each primitive's cases live in cases/<primitive>/ and run only on kits that
 * declare the primitive (`Kit.primitives`). A primitive without cases yet has no API to call: it plans nothing.
 */
export const CASES: Readonly<Record<Primitive, readonly ConformanceCase[]>> = {
  mutex: mutexCases,
  election: electionCases,
  semaphore: semaphoreCases,
  slots: slotsCases,
  rwlock: rwlockCases,
  multikey: multiKeyCases,
  'multikey-atomic': atomicMultiKeyCases,
  resume: resumeCases,
}

/** The name of the case a kit gets for each primitive it does not declare. */
export const refusalCaseName = (primitive: Primitive): string =>
  `${primitive}: the client refuses it before any I/O (CapabilityError)`

/** A backend whose every method call is counted: a refusal must send nothing to the store. */
function counted(backend: LockBackend): { backend: LockBackend; calls: string[] } {
  const calls: string[] = []
  const spy = new Proxy(backend, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver)
      if (typeof value !== 'function') return value
      // Bound to the backend itself: a class's private fields are not reachable through a proxy.
      if (name === 'close') return value.bind(target)
      return (...args: unknown[]) => {
        calls.push(String(name))
        return value.apply(target, args)
      }
    },
  })
  return { backend: spy, calls }
}

/**
 * The case a kit gets for a primitive it does not declare: the client refuses it with a `CapabilityError`
 * naming the primitive and the store, before any request. (A backend that offers the primitive after all
 * fails it: the kit must then declare it.)
 */
export function refusalCase(primitive: Primitive): ConformanceCase | undefined {
  const refuse = REFUSED[primitive]
  if (!refuse) return undefined
  return {
    name: refusalCaseName(primitive),
    async run(ctx) {
      const { backend, calls } = counted(await ctx.backend())
      const client = ctx.client(undefined, backend)
      const refused = (error: unknown) => {
        assert.ok(error instanceof CapabilityError, `expected a CapabilityError, got ${error}`)
        assert.match(error.message, refuse.says)
        assert.ok(error.message.includes(backend.id), `the message names the store: ${error.message}`)
        return true
      }
      for (const call of refuse.calls(client, ctx.key('refused'))) await assert.rejects(call, refused)
      assert.deepEqual(calls, [], 'a refused primitive sends nothing to the store')
    },
  }
}

/** Per primitive the client refuses: every entry point, and what the refusal says. */
const REFUSED: Partial<
  Record<Primitive, { says: RegExp; calls(client: LockClient, name: string): Promise<unknown>[] }>
> = {
  election: {
    says: /election .* this backend offers no leader election/,
    calls: (client, name) => {
      const election = client.election(name)
      return [
        election.campaign({ timeout: 0 }),
        election.leader(),
        election.observe()[Symbol.asyncIterator]().next(),
      ]
    },
  },
  semaphore: {
    says: /semaphore .* this backend offers no counting semaphore. Open it with \{ layout: 'slots' \}/,
    calls: (client, name) => {
      const semaphore = client.semaphore(name, { limit: 2 })
      return [semaphore.acquire({ timeout: 0 }), semaphore.inspect(), semaphore.setLimit(3)]
    },
  },
  resume: {
    says: /resum\w* lock .* this backend cannot hand a lease to another process/,
    calls: (client, name) => {
      const body = { backend: 'any', key: name, owner: 'o', fence: '1', ttlMs: 1000 }
      return [
        client.resume(`fencelock1.${Buffer.from(JSON.stringify(body)).toString('base64url')}`),
        client.acquire(name, { resumable: true }),
      ]
    },
  },
  'multikey-atomic': {
    says: /in one atomic step on .*: .*\. Leave `atomic` out/,
    calls: (client, name) => {
      const keys = [name, `${name}:2`]
      return [
        client.acquireAll(keys, { atomic: true, timeout: 0 }),
        client.tryAcquireAll(keys, { atomic: true }),
        client.withAll(keys, () => {}, { atomic: true }),
      ]
    },
  },
  rwlock: {
    says: /read-write lock .* this backend offers no read-write lock/,
    calls: (client, name) => {
      const rw = client.rwlock(name)
      return [rw.read({ timeout: 0 }), rw.write({ timeout: 0 }), rw.tryRead(), rw.tryWrite(), rw.inspect()]
    },
  },
}

/**
 * One cell of the matrix: a case runs on a kit, is skipped with the reason, or (a primitive the kit does not
 * declare) is a todo until the client refuses it.
 */
export type PlanRow = { readonly primitive: Primitive; readonly case: string } & (
  | { readonly runs: true }
  | { readonly skip: string }
  | { readonly todo: string }
)

/**
 * What the suite does on `kit`: for each primitive it declares, every case of `cases`, run where the kit has
 * what the case requires, else skipped saying why; for each primitive it does not declare, the refusal case.
 */
export function planFor(
  kit: Kit,
  cases: Readonly<Record<Primitive, readonly ConformanceCase[]>> = CASES,
): PlanRow[] {
  return PRIMITIVES.flatMap((primitive): PlanRow[] => {
    if (cases[primitive].length === 0) return []
    if (!kit.primitives.includes(primitive)) {
      const name = refusalCaseName(primitive)
      return [
        refusalCase(primitive)
          ? { primitive, case: name, runs: true }
          : { primitive, case: name, todo: `the client does not refuse a missing ${primitive} facet yet` },
      ]
    }
    return cases[primitive].map((c): PlanRow => {
      const missing = (c.requires ?? []).filter((flag) => !kit.capabilities[flag])
      if (missing.length === 0) return { primitive, case: c.name, runs: true }
      const why = missing.map((flag) => `${flag} (${kit.lacks[flag] ?? 'no reason given'})`)
      return { primitive, case: c.name, skip: `not applicable: ${why.join('; ')}` }
    })
  })
}

/** The case a plan row names. */
function caseOf(row: PlanRow): ConformanceCase {
  const found =
    CASES[row.primitive].find((c) => c.name === row.case) ??
    (row.case === refusalCaseName(row.primitive) ? refusalCase(row.primitive) : undefined)
  if (!found) throw new Error(`no ${row.primitive} conformance case named "${row.case}"`)
  return found
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
    const plan = planFor(kit)
    for (const primitive of PRIMITIVES) {
      const rows = plan.filter((row) => row.primitive === primitive)
      if (rows.length === 0) continue
      describe(primitive, () => {
        for (const row of rows) {
          if ('skip' in row) it(row.case, { skip: row.skip }, () => {})
          else if ('todo' in row) it(row.case, { todo: row.todo }, () => {})
          else {
            const c = caseOf(row)
            it(c.name, () => c.run(ctx))
          }
        }
      })
    }
  })
}
