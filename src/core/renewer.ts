/**
 * The renewer of one held lock: when to extend it (every ttl/3, sooner after an unknown outcome) and when
 * to declare it lost locally (its validity passed without a confirmed renewal). It owns the two timers;
 * the lock handle (lock.ts) owns the lease and does the extending.
 */
import { now, timerDelay } from './clock.js'

/**
 * What the renewer asks of the lock `L` it keeps. One object serves every lock of a kind (each function
 * takes the lock), so a new lock costs no closures.
 */
export interface RenewHooks<L> {
  /** Still held: neither released nor lost. */
  held(lock: L): boolean
  /** The lease's validity on the monotonic clock (`now()`), as of the latest confirmed renewal. */
  validUntil(lock: L): number
  /** The ttl renewals ask for. */
  ttlMs(lock: L): number
  /** One extend by `ttlMs` against the store, serialised with the others and the release; never rejects. */
  renew(lock: L): Promise<'renewed' | 'lost' | 'released' | { error: unknown }>
  /** The validity passed without a confirmed renewal: the lock is lost. */
  expire(lock: L): void
}

export class Renewer<L> {
  readonly #lock: L
  readonly #hooks: RenewHooks<L>
  /** Renew on a timer (`renew: true`); without it only the expiry timer runs. */
  readonly #auto: boolean
  #renewTimer: NodeJS.Timeout | undefined
  #expiryTimer: NodeJS.Timeout | undefined

  constructor(lock: L, hooks: RenewHooks<L>, auto: boolean) {
    this.#lock = lock
    this.#hooks = hooks
    this.#auto = auto
  }

  /**
   * (Re)arms both timers after a grant or a renewal. The local expiry timer fires at validUntil; the
   * renewer every ttl/3, or sooner when a slow reply left less validity than that (half the remainder,
   * so a renewal still lands in time). Both unref'd.
   */
  arm(renewInMs = Math.min(this.#ttlMs() / 3, (this.#validUntil() - now()) / 2)): void {
    this.#armExpiry()
    clearTimeout(this.#renewTimer)
    if (this.#auto) {
      this.#renewTimer = setTimeout(() => void this.#renew(), timerDelay(renewInMs))
      this.#renewTimer.unref()
    }
  }

  /** Stops both timers: the lock was released or lost. */
  stop(): void {
    clearTimeout(this.#expiryTimer)
    clearTimeout(this.#renewTimer)
  }

  #armExpiry(): void {
    clearTimeout(this.#expiryTimer)
    // A lease longer than a timer can hold is re-armed by #expiryDue until validUntil really passes.
    this.#expiryTimer = setTimeout(() => this.#expiryDue(), timerDelay(this.#validUntil() - now()))
    this.#expiryTimer.unref()
  }

  #expiryDue(): void {
    if (!this.#hooks.held(this.#lock)) return
    // The timer may fire a little early or a renewal may have just landed: re-check on the clock.
    if (now() < this.#validUntil()) {
      this.#armExpiry()
      return
    }
    this.#hooks.expire(this.#lock)
  }

  /**
   * An extend's outcome was unknown (its validity may have shrunk): the expiry timer moves to the new
   * validUntil, and a renewal is retried soon, well before it; the expiry declares the loss if none lands.
   */
  unknown(): void {
    if (!this.#hooks.held(this.#lock)) return
    const remaining = this.#validUntil() - now()
    this.arm(Math.max(10, Math.min(this.#ttlMs() / 10, remaining / 2)))
  }

  async #renew(): Promise<void> {
    const outcome = await this.#hooks.renew(this.#lock)
    if (!this.#hooks.held(this.#lock)) return
    if (outcome === 'renewed') return this.arm()
    this.unknown()
  }

  #validUntil(): number {
    return this.#hooks.validUntil(this.#lock)
  }

  #ttlMs(): number {
    return this.#hooks.ttlMs(this.#lock)
  }
}
