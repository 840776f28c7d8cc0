/**
 * Counting semaphores: at most `limit` permits held at once, each acquire's permits one lease that the core
 * renews, releases and declares lost exactly as a lock's (`acquire` runs the acquire loop on the backend's
 * semaphore facet). The semaphore adds the limit, checked against the one the store keeps, the number of
 * permits per lease, and a view of the holders. A permit's grant number is a `sequence`, not a fence: up
 * to `limit` leases are valid at once, so a resource cannot refuse "every number below the highest seen".
 */
import type { PermitRequest, SemaphoreFacet, SemaphoreInfo } from './backend.js'
import { describeValue } from './durations.js'
import { LockNotAcquiredError } from './errors.js'
import { whileHeld } from './holding.js'
import type { LockHandle } from './lock.js'
import type { AcquireOptions } from './options.js'
import { trackOwnLease } from './own-leases.js'

/** The largest limit: a semaphore's holders are read and checked whole on every grant. */
export const MAX_SEMAPHORE_LIMIT = 10_000

/** How a semaphore's permits are kept: one count (`counting`), or `limit` exclusive slots (`slots`). */
export type SemaphoreLayout = 'counting' | 'slots'

/** The layouts `SemaphoreOptions.layout` accepts. */
export const SEMAPHORE_LAYOUTS: readonly SemaphoreLayout[] = ['counting', 'slots']

/** How a semaphore is opened: `locks.semaphore(name, { limit })`. */
export interface SemaphoreOptions {
  /**
   * How many permits may be held at once, 1 to 10,000. Every client must open the semaphore with the same
   * limit while it is in use: another is refused with a `LimitMismatchError` (`setLimit` changes it on the
   * counting layout).
   */
  readonly limit: number
  /**
   * `counting` (the default): one count of permits, each acquire's a `sequence`, on the stores that keep
   * one. `slots`: `limit` exclusive slots, each an ordinary lock, each permit its slot's real fence, on
   * every store (docs/semaphore.md). Every client of a semaphore must use the same layout.
   * @default 'counting'
   */
  readonly layout?: SemaphoreLayout | undefined
}

/** Checks a layout. @throws {TypeError} naming the layouts there are */
export function parseLayout(name: string, layout: unknown): SemaphoreLayout {
  if (layout === undefined) return 'counting'
  if (SEMAPHORE_LAYOUTS.includes(layout as SemaphoreLayout)) return layout as SemaphoreLayout
  throw new TypeError(
    `Expected the \`layout\` of semaphore ${JSON.stringify(name)} to be 'counting' or 'slots', got ` +
      `${describeValue(layout)}`,
  )
}

/** What `acquire` is told: an acquire's options, and how many permits to take. */
export interface PermitOptions extends AcquireOptions {
  /** How many permits to take at once, all or none (1 to the limit). @default 1 */
  readonly permits?: number | undefined
  /** How long to wait while the permits are taken. @default Infinity: wait for them */
  readonly timeout?: AcquireOptions['timeout']
}

/** Permits held by one acquire: one lease, renewed until `release` (or `await using` ends). */
export interface HeldPermits extends AsyncDisposable {
  /** The semaphore's name. */
  readonly semaphore: string
  /** A random 128-bit id naming this lease (`SemaphoreHolder.owner`). */
  readonly owner: string
  /** How many permits this lease holds. */
  readonly permits: number
  /**
   * The grant's number: unique and increasing per semaphore, for logs and ordering. Not a fence: other
   * leases granted before it may be valid still, so a resource cannot refuse lower numbers.
   */
  readonly sequence: bigint
  /** Aborts with a `LockLostError` when the lease is lost (not when it is released). */
  readonly signal: AbortSignal
  /** Until when (`performance.now()`'s clock) the permits are certainly ours; renewals move it forward. */
  readonly validUntil: number
  /** How long the permits are still certainly ours, in ms. */
  readonly remainingMs: number
  /** Extends the lease now, by `ttl` (default: the acquire's). @throws {LockLostError} when it was lost */
  extend(ttl?: AcquireOptions['ttl']): Promise<void>
  /** Gives the permits back; idempotent. */
  release(): Promise<void>
}

/** One lease holding permits, as `inspect` shows it. */
export interface SemaphoreHolder {
  /** The lease's owner id (`HeldPermits.owner`). */
  readonly owner: string
  /** Who holds it, in words, where the store keeps it. */
  readonly holder?: string | undefined
  /** How many permits it holds. */
  readonly permits: number
  /** Its grant's sequence, where the store keeps it. */
  readonly sequence?: bigint | undefined
  /** Its remaining lease as the store sees it, in ms. */
  readonly expiresInMs?: number | undefined
  /** True when it is a lease of this client. */
  readonly isMe: boolean
}

/** A semaphore as the store keeps it now. Diagnostic: only an acquire admits. */
export interface SemaphoreView {
  /** The stored limit; this client's when the store keeps nothing of the semaphore. */
  readonly limit: number
  /** Permits held by valid leases. */
  readonly held: number
  /** Permits free now (the limit less those held, never below 0). */
  readonly available: number
  /** The leases holding permits. */
  readonly holders: readonly SemaphoreHolder[]
  /** How many acquires wait in the store's line, where it keeps one. */
  readonly waiting?: number | undefined
}

/** A semaphore, by name and limit: `locks.semaphore(name, { limit })`. */
export interface Semaphore {
  /** The semaphore's name. */
  readonly name: string
  /** The limit this client opened it with. */
  readonly limit: number
  /**
   * Waits until `permits` fit under the limit, then takes them all at once.
   * @throws {LockNotAcquiredError} when `timeout` passes first
   * @throws {LimitMismatchError} when the store keeps another limit for this semaphore
   * @throws {CapabilityError} when the backend offers no semaphore
   */
  acquire(options?: PermitOptions): Promise<HeldPermits>
  /** `acquire` with `timeout: 0` by default; resolves `null` instead of waiting. */
  tryAcquire(options?: PermitOptions): Promise<HeldPermits | null>
  /** Takes the permits, runs `fn`, and releases them; `fn` should stop when `held.signal` aborts. */
  withPermits<T>(fn: (held: HeldPermits) => T | Promise<T>, options?: PermitOptions): Promise<T>
  /** One read of the holders and the stored limit. @throws {BackendUnavailableError} as `inspect` */
  inspect(options?: { readonly signal?: AbortSignal | undefined }): Promise<SemaphoreView>
  /**
   * Stores a new limit for every client (this object's `limit` follows), and wakes the waiters. Leases held
   * beyond a lowered limit stay valid; no new permit is granted until they fit.
   */
  setLimit(limit: number, options?: { readonly signal?: AbortSignal | undefined }): Promise<void>
}

/** What a semaphore needs from its client (src/core/client.ts). */
export interface SemaphoreRuntime {
  /** The backend's semaphore facet, after the client's checks (closed, key and ttl limits, capability). */
  facet(name: string, ttlMs?: number): Promise<SemaphoreFacet>
  /** Runs one acquire: the acquire loop on the semaphore facet, with the permits asked for. */
  acquire(
    name: string,
    options: PermitOptions | undefined,
    request: PermitRequest,
    defaultTimeoutMs: number,
  ): Promise<LockHandle>
  /** A call to the facet bounded like `inspect` (a read) or a write, as the client bounds its own. */
  call<T>(
    name: string,
    kind: 'read' | 'write',
    signal: AbortSignal | undefined,
    fn: (facet: SemaphoreFacet, signal: AbortSignal) => Promise<T>,
  ): Promise<T>
}

/** Checks a limit. @throws {TypeError} naming the problem */
export function parseLimit(name: string, limit: unknown): number {
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > MAX_SEMAPHORE_LIMIT) {
    throw new TypeError(
      `Expected the \`limit\` of semaphore ${JSON.stringify(name)} to be a whole number from 1 to ` +
        `${MAX_SEMAPHORE_LIMIT}, got ${describeValue(limit)}`,
    )
  }
  return limit
}

/** Checks `permits` against the limit. @throws {TypeError} naming the problem */
export function parsePermits(name: string, permits: unknown, limit: number): number {
  if (permits === undefined) return 1
  if (typeof permits !== 'number' || !Number.isInteger(permits) || permits < 1) {
    throw new TypeError(
      `Expected \`permits\` to be a whole number of at least 1, got ${describeValue(permits)}`,
    )
  }
  if (permits > limit) {
    throw new TypeError(
      `Cannot take ${permits} permits of semaphore ${JSON.stringify(name)}: its limit is ${limit}, so they ` +
        'could never be granted. Ask for at most the limit',
    )
  }
  return permits
}

class PermitsHandle implements HeldPermits {
  readonly #lock: LockHandle
  readonly #mine: Set<string>
  readonly permits: number

  constructor(lock: LockHandle, permits: number, mine: Set<string>) {
    this.#lock = lock
    this.permits = permits
    this.#mine = mine
    trackOwnLease(lock, mine)
  }

  get semaphore(): string {
    return this.#lock.key
  }
  get owner(): string {
    return this.#lock.owner
  }
  get sequence(): bigint {
    return this.#lock.fence
  }
  get signal(): AbortSignal {
    return this.#lock.signal
  }
  get validUntil(): number {
    return this.#lock.validUntil
  }
  get remainingMs(): number {
    return this.#lock.remainingMs
  }

  async extend(ttl?: AcquireOptions['ttl']): Promise<void> {
    await this.#lock.extend(ttl)
  }

  release(): Promise<void> {
    const owner = this.#lock.owner
    return this.#lock.release().finally(() => this.#mine.delete(owner))
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release()
  }
}

export class SemaphoreImpl implements Semaphore {
  readonly name: string
  #limit: number
  readonly #runtime: SemaphoreRuntime
  /** The owner ids of this client's leases of this semaphore, while they hold: `isMe`. */
  readonly #mine = new Set<string>()

  constructor(name: string, limit: number, runtime: SemaphoreRuntime) {
    this.name = name
    this.#limit = limit
    this.#runtime = runtime
  }

  get limit(): number {
    return this.#limit
  }

  acquire(options?: PermitOptions): Promise<HeldPermits> {
    return this.#acquire(options, Infinity)
  }

  async tryAcquire(options?: PermitOptions): Promise<HeldPermits | null> {
    try {
      return await this.#acquire(options, 0)
    } catch (error) {
      if (error instanceof LockNotAcquiredError) return null
      throw error
    }
  }

  async #acquire(options: PermitOptions | undefined, defaultTimeoutMs: number): Promise<HeldPermits> {
    const permits = parsePermits(this.name, options?.permits, this.#limit)
    const lock = await this.#runtime.acquire(
      this.name,
      options,
      { limit: this.#limit, permits },
      defaultTimeoutMs,
    )
    return new PermitsHandle(lock, permits, this.#mine)
  }

  async withPermits<T>(fn: (held: HeldPermits) => T | Promise<T>, options?: PermitOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const held = await this.acquire(options)
    return whileHeld(held, () => held.release(), fn)
  }

  async inspect(options?: { readonly signal?: AbortSignal | undefined }): Promise<SemaphoreView> {
    const info = await this.#runtime.call(this.name, 'read', options?.signal, (facet, signal) =>
      facet.holders(this.name, signal),
    )
    return this.#view(info)
  }

  #view(info: SemaphoreInfo | null): SemaphoreView {
    const limit = info?.limit ?? this.#limit
    const held = info?.held ?? 0
    return {
      limit,
      held,
      available: Math.max(0, limit - held),
      holders: (info?.holders ?? []).map((h) => ({
        owner: h.owner,
        ...(h.holder === undefined ? {} : { holder: h.holder }),
        permits: h.permits,
        ...(h.sequence === undefined ? {} : { sequence: h.sequence }),
        ...(h.expiresInMs === undefined ? {} : { expiresInMs: Math.max(0, Math.floor(h.expiresInMs)) }),
        isMe: this.#mine.has(h.owner),
      })),
      ...(info?.waiting === undefined ? {} : { waiting: info.waiting }),
    }
  }

  async setLimit(limit: number, options?: { readonly signal?: AbortSignal | undefined }): Promise<void> {
    const checked = parseLimit(this.name, limit)
    await this.#runtime.call(this.name, 'write', options?.signal, (facet, signal) =>
      facet.setLimit(this.name, checked, signal),
    )
    this.#limit = checked
  }
}
