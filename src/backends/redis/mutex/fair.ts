/**
 * Fair mode (`fair: true`): waiters are served in arrival order through a queue in Redis (every client of a
 * key must use the same mode). An attempt that finds the lock held, or finds an older live waiter, joins the
 * queue and refreshes its liveness deadline; a release hands the lock straight to the first live waiter on
 * the server and tells it so in the message "<owner>:<fence>:<lease ms>" (see HAND_OVER in scripts.ts). A
 * waiter that stops asking for longer than the liveness period is presumed dead and skipped.
 */
import type { AcquireRequest, Grant } from '../../../core/backend.js'
import type { RedisStore } from '../store.js'
import { type LockLayout, named, nameOf, type RedisLockKeys } from './layout.js'
import type { Mode } from './mode.js'
import { ACQUIRE_FAIR, BREAK_FAIR, LEAVE, RELEASE_FAIR } from './scripts.js'

/** The keys every fair script takes, in the order they take them. */
const queueKeys = (k: RedisLockKeys) => [k.lock, k.fence, k.queue, k.waiters, k.ttls, k.holder, ...named(k)]

export class FairMode implements Mode {
  readonly fifo = true
  readonly #store: RedisStore
  readonly #layout: LockLayout
  /** How long a waiter stays in line without re-attempting before it is presumed dead. */
  readonly #livenessMs: number

  constructor(store: RedisStore, layout: LockLayout, livenessMs: number) {
    this.#store = store
    this.#layout = layout
    this.#livenessMs = livenessMs
  }

  acquire(req: AcquireRequest, signal: AbortSignal): Promise<unknown> {
    const k = this.#layout.keysOf(req.key)
    const args = [req.owner, req.ttlMs, this.#livenessMs, req.holder ?? '', ...nameOf(k, req.key)]
    return this.#store.run(ACQUIRE_FAIR, queueKeys(k), args, signal)
  }

  /** Owner-checked; then the lock goes to the first live waiter, on the server. */
  async release(lease: { key: string; owner: string }): Promise<boolean> {
    const k = this.#layout.keysOf(lease.key)
    const reply = await this.#store.run(RELEASE_FAIR, queueKeys(k), [
      lease.owner,
      k.channel,
      this.#livenessMs,
      ...nameOf(k, lease.key),
    ])
    return reply === 1
  }

  /** Ends whichever lease holds `key` (only that of `fence`, when given); then hands over as a release. */
  breakLock(key: string, fence: bigint | undefined): Promise<unknown> {
    const k = this.#layout.keysOf(key)
    const args = [fence?.toString() ?? '', k.channel, this.#livenessMs, ...nameOf(k, key)]
    return this.#store.run(BREAK_FAIR, queueKeys(k), args)
  }

  /** LEAVE also drops our place in the queue and passes on a lock handed to us meanwhile. */
  abandon(req: AcquireRequest): Promise<unknown> {
    const k = this.#layout.keysOf(req.key)
    const args = [req.owner, k.channel, this.#livenessMs, ...nameOf(k, req.key)]
    return this.#store.run(LEAVE, queueKeys(k), args)
  }

  /** A waiter wakes only for messages naming it (a hand-over) or concerning everyone (see Subscriptions). */
  listener(req: AcquireRequest): string {
    return req.owner
  }

  /** "<owner>:<fence>:<lease ms>" means the release handed the lock to `req` on the server. */
  handedOver(req: AcquireRequest, message: string | undefined): Grant | undefined {
    if (!message?.startsWith(`${req.owner}:`)) return undefined
    const [fence, lease] = message.slice(req.owner.length + 1).split(':')
    return { granted: true, fence: BigInt(fence!), ttlMs: Number(lease) }
  }
}
