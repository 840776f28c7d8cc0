/**
 * Plain mode (the default): a released lock goes to whoever asks first. Acquire is one script, one round
 * trip (SET NX PX + mint: the fence is minted by the grant itself), and writes one key: the lock's value
 * is "<owner> <description>", with no holder key beside it; release compares the owner, deletes, and
 * publishes on the key's channel, which wakes the oldest waiter of each client.
 *
 * Whoever asks first is most often the releasing worker itself (it asks again at once, while a waiter
 * elsewhere first hears of the release), so plain mode bounds starvation as Go's sync.Mutex does: a
 * waiter refused for longer than `starvationMs` marks itself starving on the server (ACQUIRE in
 * scripts.ts), a free lock then goes to it alone, and the release wakes it by name (">" .. its owner id).
 */
import type { AcquireRequest } from '../../../core/backend.js'
import type { RedisStore } from '../store.js'
import type { LockLayout } from './layout.js'
import type { Mode } from './mode.js'
import { ABANDON, ACQUIRE, BREAK, RELEASE } from './scripts.js'

/**
 * How long a starvation mark lives after its waiter's last attempt: how long a marked waiter that died
 * can keep a free lock from the others. The marked waiter asks again within a third of it (ACQUIRE), so
 * a live one keeps its mark through two late polls of a loaded event loop.
 */
export const STARVING_MARK_MS = 1000

export class PlainMode implements Mode {
  readonly fifo = false
  readonly #store: RedisStore
  readonly #layout: LockLayout
  /** Refused for this long, a waiter marks itself starving (0: never). */
  readonly #starvationMs: number

  constructor(store: RedisStore, layout: LockLayout, starvationMs: number) {
    this.#store = store
    this.#layout = layout
    this.#starvationMs = starvationMs
  }

  acquire(req: AcquireRequest, signal: AbortSignal): Promise<unknown> {
    const k = this.#layout.keysOf(req.key)
    const mark = this.#markMs(req)
    // Written out rather than spread from `named`/`nameOf`: this runs on every attempt.
    return k.name === undefined
      ? this.#store.run(
          ACQUIRE,
          [k.lock, k.fence, k.starving],
          [req.owner, req.ttlMs, req.holder ?? '', mark],
          signal,
        )
      : this.#store.run(
          ACQUIRE,
          [k.lock, k.fence, k.starving, k.name],
          [req.owner, req.ttlMs, req.holder ?? '', mark, req.key],
          signal,
        )
  }

  /** The mark's PX when `req`'s acquire has waited past the bound, else 0. */
  #markMs(req: AcquireRequest): number {
    if (this.#starvationMs <= 0 || req.since === undefined) return 0
    return performance.now() - req.since >= this.#starvationMs ? STARVING_MARK_MS : 0
  }

  async release(lease: { key: string; owner: string }): Promise<boolean> {
    const k = this.#layout.keysOf(lease.key)
    const reply = await this.#store.run(RELEASE, [k.lock, k.starving], [lease.owner, k.channel])
    return reply === 1
  }

  /** Ends whichever lease holds `key` (only the grant of `fence`, when given): BREAK in scripts.ts. */
  breakLock(key: string, fence: bigint | undefined): Promise<unknown> {
    const k = this.#layout.keysOf(key)
    return this.#store.run(
      BREAK,
      [k.lock, k.fence, k.holder, k.starving],
      [fence?.toString() ?? '', k.channel],
    )
  }

  /** An attempt whose outcome is unknown may hold the lock, or our starvation mark: remove both, owner-checked. */
  abandon(req: AcquireRequest): Promise<unknown> {
    const k = this.#layout.keysOf(req.key)
    return this.#store.run(ABANDON, [k.lock, k.starving], [req.owner, k.channel])
  }

  /** Any message on the channel concerns every waiter (one per client wakes: see Subscriptions). */
  listener(): undefined {
    return undefined
  }

  /** Plain mode never hands a lock over: a waiter that wakes re-attempts. */
  handedOver(): undefined {
    return undefined
  }
}
