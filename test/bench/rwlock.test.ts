import assert from 'node:assert/strict'
import { after, before, it } from 'node:test'
import { type BenchEnv, startEnv } from '../../bench/env.js'
import { measureRwLocks, type RwBenchOptions } from '../../bench/rwlock-scenarios.js'
import type { RwLockAdapter } from '../../bench/rwlocks.js'
import { RWLOCK_ADAPTERS } from '../../bench/rwlocks.js'

// The read-write lock bench, run tiny: every row comes out and kept the read-write rule. On the stores that
// have a hand-written floor (fencelock's own rows on the others are the conformance suite's), so that the
// test starts few servers. No figure is checked: the machine is shared.
const FLOORED = new Set(RWLOCK_ADAPTERS.filter((a) => a.kind === 'floor').map((a) => a.store))
const adapters = RWLOCK_ADAPTERS.filter((a) => FLOORED.has(a.store))
const TINY: RwBenchOptions = { seconds: 0.3, rounds: 2, settleMs: 30, ttlMs: 10_000 }

let bench: BenchEnv
before(async () => {
  bench = await startEnv(adapters)
})
after(() => bench?.close())

it('gives a row per adapter in every scenario, none of which put a writer beside another holder', async () => {
  const scenarios = await measureRwLocks(adapters, bench.env, TINY)
  for (const id of ['t', 'h', 'm']) {
    const rows = scenarios.find((s) => s.id === id)!.rows
    assert.deepEqual(
      rows.map((r) => r.adapter),
      adapters.map((a) => a.name),
      `scenario ${id}`,
    )
    for (const row of rows)
      assert.ok(row.error || Object.keys(row.metrics).length > 0, `${id}: ${row.adapter}`)
  }
  // Every failed row at once: a floor broken in one way fails several.
  const failed = scenarios.flatMap((s) => s.rows.filter((r) => r.error).map((r) => `${s.id}: ${r.error}`))
  assert.deepEqual(failed, [])
  // Requests per grant are counted on Redis: a row for fencelock and one for the Redisson-style floor.
  const counted = scenarios.find((s) => s.id === 'r')!.rows
  assert.deepEqual(
    counted.map((r) => r.adapter),
    adapters.filter((a) => a.store === 'redis').map((a) => a.name),
  )
})

it('fails the rows of a floor that lets a writer in beside readers', async () => {
  const floor = adapters.find((a) => a.store === 'memory' && a.kind === 'floor')!
  const broken: RwLockAdapter = {
    ...floor,
    name: 'broken floor',
    async contender(env, ttlMs) {
      const contender = await floor.contender(env, ttlMs)
      return {
        acquire: (name, mode) =>
          mode === 'write' ? Promise.resolve({ release: async () => {} }) : contender.acquire(name, mode),
        close: () => contender.close(),
      }
    },
  }
  const scenarios = await measureRwLocks([broken], bench.env, TINY)
  // h lets the writer wait while two readers hold: granted at once, it is seen every time.
  const [handoff] = scenarios.find((s) => s.id === 'h')!.rows
  assert.match(handoff?.error ?? '', /granted while the holders held/)
})
