/**
 * The short chaos run of CI, dealt into parts (`chaos-<n>.test.ts`, one `defineShortChaos(n)` each) so
 * that the test runner's two lanes run them side by side: the scenarios of CI_SCENARIOS, each on the stores
 * STORES names below (file and Redis unless it says otherwise): mostly stores that start in a second,
 * the 3-member etcd and ZooKeeper where a fault needs members. Fails on any unexpected violation; a
 * failing run keeps its history, seed and report (the path is in the message) so it can be replayed with
 * `npm run chaos -- --seed`. The full matrix is `npm run chaos`.
 */
import assert from 'node:assert/strict'
import { existsSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { figuresLine, runScenario } from './harness.js'
import { CI_SCENARIOS, scenarios } from './scenarios.js'
import { targets } from './targets.js'

const DURATION_MS = Number(process.env.FENCELOCK_CHAOS_MS ?? 20_000)
/**
 * Redis with persistence only where it changes the answer (a crash); etcd for the killed holder, whose
 * lock must not outlive its session's lease (S7 found that it did).
 */
const STORES: Record<string, string[]> = {
  S1: ['file', 'redis', 's3'],
  S5: ['redis', 'redis-aof'],
  // The cas-lease engine's takeover of a dead holder's lease, by observed expiry, on a real store (DynamoDB Local).
  S7: ['etcd', 'dynamodb'],
  // ZooKeeper's 3-member ensemble: its leader killed under the holders (sessions move to a new leader).
  S8: ['zookeeper-3'],
  S16: ['s3'],
  // Issue 11's sequences: a key's folder removed under its holder (fences must not go back), nodes
  // restarted empty one after another (fences must not go back), acquires aborted at every await point
  // (nothing may be left behind).
  S11: ['file'],
  S6: ['redlock'],
  // postgres: an acquire's clean-up once reached the server before its statement (a grant left behind);
  // mysql: a statement given up while it ran left its connection stuck.
  S15: ['file', 'redis', 'etcd', 'postgres', 'mysql'],
  // The second fault review's classes: lock state deleted by an operator (fences must keep rising, nobody
  // may wait on a free lock), a holder whose renewals and release go unanswered, clients each cut off
  // from a different Redlock node.
  S17: ['redis', 'file', 'etcd', 's3', 'postgres'],
  S18: ['etcd-3', 'zookeeper-3'],
  S20: ['file'],
  S19: ['redis', 'etcd'],
  S21: ['redlock'],
  // An operator's break while others wait: on file, the break that ended a waiter's grant on top of the
  // one it found was caught in every 15 s run before its fix (A8).
  S22: ['file'],
  // Leader election: a paused ex-leader's late write refused by its term (file), a leader cut off from its
  // session's store (etcd), a killed leader replaced (Redis), campaigns given up at any await point leave no
  // candidate that leads later (file).
  L2: ['file'],
  L4: ['etcd'],
  L7: ['redis'],
  L15: ['file'],
  // Semaphores: holders killed while others hold and wait (Redis), acquires given up at any await point
  // (file); never more than the limit valid at once, nothing left behind.
  M7: ['redis'],
  M15: ['file'],
  // Slots semaphores: holders killed while others wait (file: a dead holder's slot is found by an attempt
  // at once); each slot one holder, fences rising per slot.
  N7: ['file'],
  // Read-write locks: acquires of readers and writers given up at any await point (file); a writer never
  // beside another holder, nothing left behind in line.
  R15: ['file'],
}
const storesFor = (id: string) => STORES[id] ?? ['file', 'redis']

/** How many parts the short set is dealt into (one `chaos-<n>.test.ts` file each, n = 1..PARTS). */
export const PARTS = 3

/**
 * Every (scenario, target) pair of the short set, in order, dealt round-robin into PARTS parts: each
 * pair runs for about the same time (DURATION_MS), so the parts stay even as pairs are added.
 */
export const shortRuns = (part: number): { id: string; target: string }[] =>
  CI_SCENARIOS.flatMap((id) => storesFor(id).map((target) => ({ id, target }))).filter(
    (_, i) => i % PARTS === part - 1,
  )

export function defineShortChaos(part: number): void {
  describe(`chaos (short, part ${part} of ${PARTS})`, { concurrency: 1 }, () => {
    const outDir = join(tmpdir(), `fencelock-chaos-${process.pid}`)
    let seed = Date.now() % 100_000
    if (part === 1) {
      it('every part of the short set has its test file', () => {
        const here = dirname(fileURLToPath(import.meta.url))
        for (let n = 1; n <= PARTS; n++) {
          assert.ok(
            existsSync(join(here, `chaos-${n}.test.js`)),
            `chaos-${n}.test.ts is missing: its runs would never run`,
          )
        }
      })
    }
    for (const { id, target: name } of shortRuns(part)) {
      const scenario = scenarios.find((s) => s.id === id)!
      const target = targets[name]!
      if (scenario.applies(target)) {
        it(`${id} on ${name}: ${scenario.title}`, { timeout: DURATION_MS + 120_000 }, async () => {
          const result = await runScenario(scenario, target, {
            seed: seed++,
            durationMs: DURATION_MS,
            outDir,
          })
          const line = figuresLine(result)
          console.log(line)
          assert.equal(result.verdict === 'violation', false, `${line}\nhistory kept in ${result.dir}`)
          // A run that did nothing proves nothing.
          assert.ok(result.report.grants > 0, `no grant at all: ${line}`)
          if (scenario.nemesis) {
            const faults = Object.values(result.report.faultsByType).reduce((a, b) => a + b, 0)
            assert.ok(faults > 0, `the nemesis injected no fault: ${line}`)
          }
          rmSync(result.dir, { recursive: true, force: true })
        })
      }
    }
  })
}
