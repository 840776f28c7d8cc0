/**
 * Plain mode (the default): a released lock goes to whoever asks first. Acquire is one script, one round
 * trip (SET NX PX + mint: the fence is minted by the grant itself); release compares the owner, deletes,
 * and publishes "-<owner>" on the key's channel, which wakes the oldest waiter of each client.
 */
import type { AcquireRequest } from '../../core/backend.js'
import type { Mode } from './backend.js'
import { named, nameOf } from './layout.js'
import { ACQUIRE, BREAK, RELEASE } from './scripts.js'
import type { RedisStore } from './store.js'

export class PlainMode implements Mode {
  readonly fifo = false
  readonly #store: RedisStore

  constructor(store: RedisStore) {
    this.#store = store
  }

  acquire(req: AcquireRequest, signal: AbortSignal): Promise<unknown> {
    const k = this.#store.keysOf(req.key)
    return this.#store.run(
      ACQUIRE,
      [k.lock, k.fence, k.holder, ...named(k)],
      [req.owner, req.ttlMs, req.holder ?? '', ...nameOf(k, req.key)],
      signal,
    )
  }

  async release(lease: { key: string; owner: string }): Promise<boolean> {
    const k = this.#store.keysOf(lease.key)
    return (await this.#store.run(RELEASE, [k.lock, k.holder], [lease.owner, k.channel])) === 1
  }

  /** Ends whichever lease holds `key` (only the grant of `fence`, when given): BREAK in scripts.ts. */
  breakLock(key: string, fence: bigint | undefined): Promise<unknown> {
    const k = this.#store.keysOf(key)
    return this.#store.run(BREAK, [k.lock, k.fence, k.holder], [fence?.toString() ?? '', k.channel])
  }

  /** An attempt whose outcome is unknown may hold the lock: release it, owner-checked as always. */
  abandon(req: AcquireRequest): Promise<unknown> {
    return this.release(req)
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
