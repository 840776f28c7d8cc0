/**
 * When each held lock is extended (every ttl/3, sooner after an unknown outcome) and when it is declared
 * lost locally (its validity passed without a confirmed renewal). Every lock of a client shares one
 * timer (`Renewals`, on scheduler.ts): a lock's renewer is its entry there, due at the earlier of its
 * next renewal and its validUntil. Renewals that come due together are handed over together, so a store
 * that can extend many leases in one request (`LeaseFacet.extendMany`) gets them as one batch. The lock
 * handle (lock.ts) owns the lease and does the extending.
 */
import { now } from './clock.js'
import { type Scheduled, Scheduler } from './scheduler.js'

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
  /**
   * Starts one extend by `ttlMs` of each lock (one request for all where the store can), serialised with
   * each lock's other extends and its release. Each lock then tells its renewer the outcome (`arm` after a
   * confirmed renewal, `unknown` otherwise) unless it was lost or released meanwhile. Never throws.
   */
  renew(locks: L[]): void
  /** The validity passed without a confirmed renewal: the lock is lost. */
  expire(lock: L): void
}

/**
 * The longest a renewal is moved earlier so that it goes out with others: renewals fall on a grid of
 * ttl/30 (at most this), and every lock of one ttl renewed in the same slot of it is due at one instant.
 */
const MAX_GATHER_MS = 100

/** The timer of every held lock of one client, and the hooks they are renewed through. */
export class Renewals<L> {
  readonly hooks: RenewHooks<L>
  readonly scheduler: Scheduler<Renewer<L>>

  constructor(hooks: RenewHooks<L>) {
    this.hooks = hooks
    this.scheduler = new Scheduler((entries, at) => this.#run(entries, at))
  }

  #run(entries: readonly Renewer<L>[], at: number): void {
    const due: L[] = []
    for (const renewer of entries) if (renewer.due(at)) due.push(renewer.lock)
    if (due.length > 0) this.hooks.renew(due)
  }
}

export class Renewer<L> implements Scheduled {
  dueAt = Number.POSITIVE_INFINITY
  heapIndex = -1
  readonly lock: L
  readonly #renewals: Renewals<L>
  /** Renew on the timer (`renew: true`); without it only the expiry is scheduled. */
  readonly #auto: boolean
  /** When the next renewal is due; Infinity while one is in flight, or without `renew`. */
  #renewAt = Number.POSITIVE_INFINITY

  constructor(lock: L, renewals: Renewals<L>, auto: boolean) {
    this.lock = lock
    this.#renewals = renewals
    this.#auto = auto
  }

  /**
   * (Re)schedules after a grant or a confirmed renewal. The expiry falls at validUntil; the renewal once a
   * third of the ttl has passed since the validity's start (when the renewal was sent, not when its reply
   * came: a slow reply under load must not push the next renewal later), and never later than half the
   * remainder, so a renewal still lands in time; moved earlier onto the grid of its ttl so that it goes
   * out with others.
   */
  arm(renewInMs = this.#nextRenewalIn()): void {
    if (this.#auto) {
      const at = now() + renewInMs
      const grid = Math.min(this.#ttlMs() / 30, MAX_GATHER_MS)
      // Only a renewal far enough out moves: one due soon (a retry, a short remainder) must not come sooner still.
      this.#renewAt = grid >= 1 && renewInMs >= 4 * grid ? Math.floor(at / grid) * grid : at
    }
    this.#schedule()
  }

  /** Until the next renewal: while 2/3 of the ttl is left, or half the remainder if sooner (at least 10 ms). */
  #nextRenewalIn(): number {
    const remaining = this.#validUntil() - now()
    return Math.max(10, Math.min(remaining - (2 * this.#ttlMs()) / 3, remaining / 2))
  }

  /** Unschedules the lock: it was released or lost. */
  stop(): void {
    this.#renewAt = Number.POSITIVE_INFINITY
    this.#renewals.scheduler.cancel(this)
  }

  /**
   * An extend's outcome was unknown (its validity may have shrunk): the expiry moves to the new
   * validUntil, and a renewal is retried soon, well before it; the expiry declares the loss if none lands.
   */
  unknown(): void {
    if (!this.#renewals.hooks.held(this.lock)) return
    const remaining = this.#validUntil() - now()
    this.arm(Math.max(10, Math.min(this.#ttlMs() / 10, remaining / 2)))
  }

  /**
   * The scheduler's call at `dueAt`: declares the loss at validUntil, or returns true when a renewal is due
   * (the caller starts it; the expiry stays scheduled while it is in flight).
   */
  due(at: number): boolean {
    const hooks = this.#renewals.hooks
    if (!hooks.held(this.lock)) return false
    // Re-checked on the clock: a renewal may have just moved validUntil.
    if (at >= this.#validUntil()) {
      hooks.expire(this.lock)
      return false
    }
    const renewNow = at >= this.#renewAt
    if (renewNow) this.#renewAt = Number.POSITIVE_INFINITY
    this.#schedule()
    return renewNow
  }

  #schedule(): void {
    this.#renewals.scheduler.schedule(this, Math.min(this.#renewAt, this.#validUntil()))
  }

  #validUntil(): number {
    return this.#renewals.hooks.validUntil(this.lock)
  }

  #ttlMs(): number {
    return this.#renewals.hooks.ttlMs(this.lock)
  }
}
