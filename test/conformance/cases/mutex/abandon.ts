import assert from 'node:assert/strict'
import { setImmediate as turn } from 'node:timers/promises'
import { type AcquireRequest, createLockClient, type Lock, type LockBackend } from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import type { ConformanceCase } from '../../harness.js'
import { wrapBackend } from '../../wrap.js'

/**
 * Where an acquire is interrupted: each await point of an attempt or a wait.
 * - `before-send`: as the attempt starts (the store sees an already-aborted signal);
 * - `in-flight`: right after the attempt's request went out (its reply may still grant);
 * - `next-turn`: one event-loop turn after that;
 * - `after-reply`: after the store answered, before the core sees the answer (a grant the caller never gets);
 * - `waiting`: while the acquire waits for a holder (its queue ticket, if any, is in place);
 * - `hand-over`: as a release wakes (or, in a fair queue, hands the lock to) the waiting acquire.
 */
const POINTS = ['before-send', 'in-flight', 'next-turn', 'after-reply', 'waiting', 'hand-over'] as const
type Point = (typeof POINTS)[number]

/** Wraps a backend so that `interrupt` runs once, at `point`. Everything else passes through. */
function interrupting(
  inner: LockBackend,
  point: Point,
  interrupt: () => void,
  onWait: () => void,
): LockBackend {
  let fired = false
  const fire = () => {
    if (fired) return
    fired = true
    interrupt()
  }
  return wrapBackend(inner, {
    async tryAcquire(req: AcquireRequest, signal: AbortSignal) {
      if (point === 'before-send') fire()
      const attempt = awaitLater(inner.tryAcquire(req, signal))
      if (point === 'in-flight') fire()
      if (point === 'next-turn') {
        await turn()
        fire()
      }
      if (point !== 'after-reply') return attempt
      const result = await attempt
      fire()
      return result
    },
    async waitForChange(req: AcquireRequest, signal: AbortSignal) {
      const wait = inner.waitForChange?.(req, signal)
      onWait()
      if (point === 'waiting') {
        await turn()
        fire()
      }
      const result = await wait
      if (point === 'hand-over') fire()
      return result
    },
  })
}

/**
 * "Outcome unknown -> owner-checked clean-up": an acquire aborted or closed at any await point leaves
 * nothing behind. The lease is 30 s, so a leaked hold (or a queue ticket in the way) would keep another
 * client out far longer than the 5 s it is given.
 */
export const abandonCases: ConformanceCase[] = (['abort', 'close'] as const).map((how) => ({
  name: `an acquire interrupted by ${how} at any await point leaves the lock free for others`,
  async run(ctx) {
    for (const point of POINTS) {
      const key = ctx.key(`abandon-${how}-${point}`)
      const contended = point === 'waiting' || point === 'hand-over'
      const holder = contended ? await ctx.client().acquire(key) : undefined
      const controller = new AbortController()
      let victimClient: ReturnType<typeof createLockClient> | undefined
      const interrupt = () => {
        if (how === 'abort') controller.abort(new Error(`interrupted at ${point}`))
        else void victimClient?.close()
      }
      let waited: () => void = () => {}
      const waiting = new Promise<void>((resolve) => {
        waited = resolve
      })
      const backend = interrupting(await ctx.backend(), point, interrupt, () => waited())
      // Connected first, as a long-lived client is: a request queued behind a connection that is still
      // being made would be dropped by the close, and hide the race this case is about.
      await backend.inspect(ctx.key('warm-up'), AbortSignal.timeout(10_000))
      victimClient = createLockClient(backend, { ttl: '30s' })
      const pending = victimClient.acquire(key, { signal: controller.signal, timeout: '20s' })
      pending.catch(() => {})
      if (point === 'hand-over') {
        // The victim waits once it has been refused (and queued, where the store queues); then the
        // release wakes it, or hands it the lock.
        await waiting
        await sleep(50)
        await holder?.release()
      } else if (point === 'waiting') {
        // Interrupted while waiting; the holder then leaves, so only a leak could keep the key.
        setTimeout(() => void holder?.release(), 300)
      }
      const outcome = await pending.then(
        (lock) => lock,
        (error: unknown) => error,
      )
      // A lock granted despite the interruption (it came before the abort was seen) is fine if released.
      if (outcome && typeof outcome === 'object' && 'release' in outcome) await (outcome as Lock).release()
      await victimClient.close()
      await holder?.release()
      const other = ctx.client({ ttl: '30s' })
      const next = await other
        .acquire(key, { timeout: '5s' })
        .catch((error: unknown) => assert.fail(`${point}: the key stayed held after the ${how}: ${error}`))
      await next.release()
    }
  },
}))
