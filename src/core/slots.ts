/**
 * The slots layout of a semaphore (`layout: 'slots'`): `limit` exclusive slots, each an ordinary lock of a
 * reserved key, so it runs on every store over the mutex alone and each permit carries its slot's real
 * fence. Built once here, over the client's normal acquire of one key.
 *
 * - Keys: slot `i` of a semaphore opened with limit `L` is the lock `<name>\uFFFF<L>\uFFFF<i>`. U+FFFF is a
 *   Unicode noncharacter, kept for internal use; `validateKey` refuses it in every key and name, so no user
 *   key is a slot key and no semaphore's slots fall under another's prefix (`<name>\uFFFF`).
 * - Waiting: one listing of the semaphore's prefix per poll (never a read or a watch per slot), free slots
 *   picked from it from a random start, and a release by this client wakes one of its waiters. `permits: k`
 *   takes k slots all or none: what was taken is released before the next wait.
 * - Held slots: each poll that finds too few free slots also tries the held slots nearest their end (at
 *   most the permits missing), except on session stores where an attempt queues an entry. On S3, GCS and
 *   DynamoDB a dead holder's slot is taken over only once the engine has seen it unchanged for a lease, and
 *   the listing notes nothing as seen: the engine keeps what it saw of each key across acquires, so these
 *   attempts carry the observation on. On file they find a holder whose processes are gone at once.
 * - The limit is in the slot keys. Every grant is followed by a listing: a held slot of another limit
 *   refuses the grant (`LimitMismatchError`, our slots released). Both clients write before they read, so
 *   of two that race with limits 4 and 8 at least one sees the other's slot: never 8 permits where a
 *   client expects 4. This needs a listing that shows every grant completed before it began (each store's
 *   `list` reads its authority: a quorum on Redlock, consistent scans on DynamoDB).
 */
import type { ListedLock } from './backend.js'
import { now } from './clock.js'
import {
  BackendUnavailableError,
  CapabilityError,
  LimitMismatchError,
  LockNotAcquiredError,
  quoteKey,
} from './errors.js'
import { whileHeld } from './holding.js'
import type { Lock } from './lock.js'
import { MultiLockHandle } from './multi-key.js'
import { ACQUIRE_OPTIONS, type AcquireOptions, assertKnownKeys } from './options.js'
import {
  type HeldPermits,
  type PermitOptions,
  parsePermits,
  type Semaphore,
  type SemaphoreHolder,
  type SemaphoreView,
} from './semaphore.js'

/** Separates a semaphore's name, limit and slot in a slot key: a noncharacter no key may hold. */
export const SLOT_SEPARATOR = '\uFFFF'

/** The first poll of a waiter that found too few free slots; it doubles up to `POLL_MAX_MS`. */
const POLL_FIRST_MS = 25
/** The slowest poll: a release elsewhere is seen within about this long. */
const POLL_MAX_MS = 500
/** How long a failing store is tried again at least, also by a `tryAcquire` (the acquire loop's floor). */
const UNAVAILABLE_FLOOR_MS = 1_000

/** The prefix every slot key of semaphore `name` starts with, whatever the limit. */
export function slotPrefix(name: string): string {
  return `${name}${SLOT_SEPARATOR}`
}

/** The lock key of slot `index` of semaphore `name` opened with `limit`. */
export function slotKey(name: string, limit: number, index: number): string {
  return `${slotPrefix(name)}${limit}${SLOT_SEPARATOR}${index}`
}

/** The limit and index a slot key of `name` encodes; undefined for a key of another shape. */
export function parseSlotKey(name: string, key: string): { limit: number; index: number } | undefined {
  const prefix = slotPrefix(name)
  if (!key.startsWith(prefix)) return undefined
  const match = /^([1-9][0-9]*)\uFFFF(0|[1-9][0-9]*)$/.exec(key.slice(prefix.length))
  if (!match) return undefined
  const limit = Number(match[1])
  const index = Number(match[2])
  return index < limit ? { limit, index } : undefined
}

/** Permits of a slots semaphore: one ordinary lock per slot, renewed, lost and released together. */
export interface SlotPermits extends HeldPermits {
  /**
   * The fence of the first slot held (`slots[0]`): a real lock fence, strictly increasing per slot. Pass
   * it with that slot's key (`slots[0].key`) to the resource the slot guards.
   */
  readonly fence: bigint
  /** The slots held, one lock each (its `key`, `fence`, validity), in the order they were taken. */
  readonly slots: readonly Lock[]
  /** Each slot's fence, in the order of `slots`. */
  readonly fences: readonly bigint[]
}

/** One slot of a slots semaphore, as `inspect` shows it. */
export interface SlotView {
  /** The slot's number, 0 to the limit less 1. */
  readonly index: number
  /** Its lock key. */
  readonly key: string
  /** Whether a lease holds it now. */
  readonly held: boolean
  /** The holder's owner id, while held. */
  readonly owner?: string | undefined
  /** Its current fence, while held. */
  readonly fence?: bigint | undefined
  /** Its remaining lease as the store sees it, in ms, while held. */
  readonly expiresInMs?: number | undefined
}

/** A slots semaphore as the store keeps it now: the counting view, and each slot. */
export interface SlotsView extends SemaphoreView {
  /** Every slot of the limit this client opened it with. */
  readonly slots: readonly SlotView[]
}

/** A semaphore of `limit` exclusive slots: `locks.semaphore(name, { limit, layout: 'slots' })`. */
export interface SlotsSemaphore extends Semaphore {
  acquire(options?: PermitOptions): Promise<SlotPermits>
  tryAcquire(options?: PermitOptions): Promise<SlotPermits | null>
  withPermits<T>(fn: (held: SlotPermits) => T | Promise<T>, options?: PermitOptions): Promise<T>
  inspect(options?: { readonly signal?: AbortSignal | undefined }): Promise<SlotsView>
}

/** What a slots semaphore needs of its client. */
export interface SlotsRuntime {
  /** Checks before any I/O (options, the slot keys against the store's limits, `list`); one acquire's plan. */
  prepare(
    name: string,
    limit: number,
    options: AcquireOptions,
    defaultTimeoutMs: number,
  ): Promise<PreparedSlots>
  /** One bounded listing of the semaphore's slot keys (`slotPrefix`), of every limit. */
  list(name: string, signal: AbortSignal | undefined): Promise<ListedLock[]>
}

/** One acquire of slots, its options resolved. */
export interface PreparedSlots {
  readonly timeoutMs: number
  /** The caller's signal and the client's close, linked; `dispose` when the acquire ends. */
  readonly signal: AbortSignal
  dispose(): void
  readonly backendId: string
  /**
   * Whether a poll also tries the held slots nearest their end: where an attempt can find a dead holder's
   * lease over before the listing does (file: its processes gone), or must observe it (S3, GCS,
   * DynamoDB). Not on session stores, where an attempt queues an entry (etcd, ZooKeeper).
   */
  readonly tryHeld: boolean
  /** One acquire of `key` through the normal path with no waiting: the lock, or null when it is held. */
  take(key: string): Promise<Lock | null>
}

/** The limit of the first held slot of another limit than `limit`, if any. */
function otherLimit(name: string, limit: number, listing: readonly ListedLock[]): number | undefined {
  for (const slot of listing) {
    const parsed = parseSlotKey(name, slot.key)
    if (slot.held && parsed && parsed.limit !== limit) return parsed.limit
  }
  return undefined
}

/** Slots to try, best first: the free ones from a random start, then held ones nearest their end. */
function candidates(
  name: string,
  limit: number,
  permits: number,
  listing: readonly ListedLock[],
  tryHeld: boolean,
): string[] {
  const held = new Map<number, ListedLock>()
  for (const slot of listing) {
    const parsed = parseSlotKey(name, slot.key)
    if (slot.held && parsed?.limit === limit) held.set(parsed.index, slot)
  }
  const start = Math.floor(Math.random() * limit)
  const free: string[] = []
  for (let i = 0; i < limit; i++) {
    const index = (start + i) % limit
    if (!held.has(index)) free.push(slotKey(name, limit, index))
  }
  const missing = permits - free.length
  if (missing <= 0) return free
  // A listed slot may be one whose lease already ended (expired, not yet cleaned, its holder's processes
  // gone); on the observed-expiry stores only an attempt advances the observation that lets a dead
  // holder's slot be taken over. At most the permits missing: never an attempt per slot.
  const ending = [...held.values()]
    .filter((slot) => tryHeld || (slot.expiresInMs ?? 1) <= 0)
    .sort((a, b) => (a.expiresInMs ?? Infinity) - (b.expiresInMs ?? Infinity))
    .slice(0, missing)
  return [...free, ...ending.map((slot) => slot.key)]
}

class SlotPermitsHandle implements SlotPermits {
  readonly semaphore: string
  readonly slots: readonly Lock[]
  readonly fences: readonly bigint[]
  /** The slots' locks together: one loss signal, one release. */
  readonly #all: MultiLockHandle
  readonly #onRelease: () => void

  constructor(name: string, slots: readonly Lock[], onRelease: () => void) {
    this.semaphore = name
    this.slots = slots
    this.fences = slots.map((slot) => slot.fence)
    this.#all = new MultiLockHandle(
      slots.map((slot) => slot.key),
      slots,
      `the ${slots.length === 1 ? 'slot' : `${slots.length} slots`} of semaphore ${quoteKey(name)}`,
    )
    this.#onRelease = onRelease
  }

  get owner(): string {
    return this.slots[0]!.owner
  }
  get permits(): number {
    return this.slots.length
  }
  get fence(): bigint {
    return this.fences[0]!
  }
  get sequence(): bigint {
    return this.fences[0]!
  }
  get signal(): AbortSignal {
    return this.#all.signal
  }
  get validUntil(): number {
    return this.#all.validUntil
  }
  get remainingMs(): number {
    return Math.max(0, this.#all.validUntil - now())
  }

  async extend(ttl?: AcquireOptions['ttl']): Promise<void> {
    await Promise.all(this.slots.map((slot) => slot.extend(ttl)))
  }

  async release(): Promise<void> {
    try {
      await this.#all.release()
    } finally {
      this.#onRelease()
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release()
  }
}

export class SlotsSemaphoreImpl implements SlotsSemaphore {
  readonly name: string
  readonly limit: number
  readonly #runtime: SlotsRuntime
  /** The owner ids of this client's slots of this semaphore, while held: `isMe`. */
  readonly #mine = new Set<string>()
  /** Wakes of this client's waiters: a release here wakes one at once instead of at its next poll. */
  readonly #waiters = new Set<() => void>()

  constructor(name: string, limit: number, runtime: SlotsRuntime) {
    this.name = name
    this.limit = limit
    this.#runtime = runtime
  }

  acquire(options?: PermitOptions): Promise<SlotPermits> {
    return this.#acquire(options, Infinity)
  }

  async tryAcquire(options?: PermitOptions): Promise<SlotPermits | null> {
    try {
      return await this.#acquire(options, 0)
    } catch (error) {
      if (error instanceof LockNotAcquiredError) return null
      throw error
    }
  }

  async withPermits<T>(fn: (held: SlotPermits) => T | Promise<T>, options?: PermitOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const held = await this.acquire(options)
    return whileHeld(held, () => held.release(), fn)
  }

  async #acquire(options: PermitOptions | undefined, defaultTimeoutMs: number): Promise<SlotPermits> {
    assertKnownKeys('semaphore acquire options', options, [...ACQUIRE_OPTIONS, 'permits'])
    const { permits: asked, ...acquireOptions } = options ?? {}
    const permits = parsePermits(this.name, asked, this.limit)
    const prepared = await this.#runtime.prepare(this.name, this.limit, acquireOptions, defaultTimeoutMs)
    try {
      return await this.#wait(prepared, permits)
    } finally {
      prepared.dispose()
    }
  }

  async #wait(prepared: PreparedSlots, permits: number): Promise<SlotPermits> {
    const start = now()
    const deadline = start + prepared.timeoutMs
    // A store that fails is tried again until the deadline, and for a while even by a `tryAcquire`, as
    // the acquire of one key is: a fresh connection, a node catching up.
    const unavailableUntil = Math.max(deadline, start + UNAVAILABLE_FLOOR_MS)
    const { signal } = prepared
    let pollMs = POLL_FIRST_MS
    let failure: BackendUnavailableError | undefined
    for (;;) {
      const taken: Lock[] = []
      try {
        const listing = await this.#withoutDeadOthers(await this.#list(prepared), prepared)
        this.#refuseOtherLimit(listing, prepared)
        for (const key of candidates(this.name, this.limit, permits, listing, prepared.tryHeld)) {
          if (taken.length === permits) break
          const lock = await prepared.take(key)
          if (lock) taken.push(lock)
        }
        if (taken.length === permits) {
          // The limit check after the grant (see the header): a slot of another limit refuses it.
          this.#refuseOtherLimit(await this.#list(prepared), prepared)
          return this.#held(taken)
        }
        failure = undefined
      } catch (error) {
        await releaseAll(taken)
        const retry = error instanceof BackendUnavailableError && error.retryable && !signal.aborted
        if (!retry || now() >= unavailableUntil) throw error
        failure = error
      }
      // All or nothing: what was taken goes back before the wait, for others to take meanwhile.
      await releaseAll(taken)
      if (taken.length > 0) this.#wakeOne()
      const left = (failure ? unavailableUntil : deadline) - now()
      if (left <= 0) {
        if (failure) throw failure
        throw new LockNotAcquiredError(
          `Could not take ${permits} slot(s) of semaphore ${quoteKey(this.name)} (limit ${this.limit}) on ` +
            `${prepared.backendId} within the timeout: they were held. Retry later, or wait longer`,
          { key: this.name, backend: prepared.backendId },
        )
      }
      await this.#nap(Math.min(pollMs, left), signal)
      if (signal.aborted) throw signal.reason
      pollMs = Math.min(pollMs * 2, POLL_MAX_MS)
    }
  }

  #list(prepared: PreparedSlots): Promise<ListedLock[]> {
    return this.#runtime.list(this.name, prepared.signal)
  }

  /**
   * `listing` less the slots of another limit that an attempt finds over (taken, then given back at once):
   * on the observed-expiry stores a dead holder's slot is listed held until an attempt has seen it
   * unchanged for a lease, and no client of this limit would ever try it, so a crashed client of an old
   * limit would refuse every acquire forever. Where an attempt queues an entry (session stores), none.
   */
  async #withoutDeadOthers(listing: ListedLock[], prepared: PreparedSlots): Promise<ListedLock[]> {
    if (!prepared.tryHeld) return listing
    const kept: ListedLock[] = []
    for (const slot of listing) {
      const parsed = parseSlotKey(this.name, slot.key)
      if (slot.held && parsed && parsed.limit !== this.limit) {
        const lock = await prepared.take(slot.key)
        if (lock) {
          await releaseAll([lock])
          continue
        }
      }
      kept.push(slot)
    }
    return kept
  }

  #refuseOtherLimit(listing: readonly ListedLock[], prepared: PreparedSlots): void {
    const stored = otherLimit(this.name, this.limit, listing)
    if (stored === undefined) return
    throw new LimitMismatchError(stored, this.limit, { key: this.name, backend: prepared.backendId })
  }

  #held(slots: readonly Lock[]): SlotPermits {
    const owners = slots.map((slot) => slot.owner)
    for (const owner of owners) this.#mine.add(owner)
    return new SlotPermitsHandle(this.name, slots, () => {
      for (const owner of owners) this.#mine.delete(owner)
      this.#wakeOne()
    })
  }

  /** Sleeps `ms`, or until a release by this client wakes this waiter, or `signal` aborts. */
  #nap(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        signal.removeEventListener('abort', done)
        this.#waiters.delete(done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      signal.addEventListener('abort', done, { once: true })
      this.#waiters.add(done)
    })
  }

  #wakeOne(): void {
    const first = this.#waiters.values().next()
    if (!first.done) first.value()
  }

  async inspect(options?: { readonly signal?: AbortSignal | undefined }): Promise<SlotsView> {
    const listing = await this.#runtime.list(this.name, options?.signal)
    const byIndex = new Map<number, ListedLock>()
    for (const slot of listing) {
      const parsed = parseSlotKey(this.name, slot.key)
      if (parsed?.limit === this.limit) byIndex.set(parsed.index, slot)
    }
    const slots: SlotView[] = []
    const holders: SemaphoreHolder[] = []
    for (let index = 0; index < this.limit; index++) {
      const key = slotKey(this.name, this.limit, index)
      const slot = byIndex.get(index)
      if (!slot?.held) {
        slots.push({ index, key, held: false })
        continue
      }
      const expiresInMs = slot.expiresInMs === undefined ? undefined : Math.max(0, slot.expiresInMs)
      slots.push({ index, key, held: true, owner: slot.owner, fence: slot.fence, expiresInMs })
      holders.push({
        owner: slot.owner ?? '',
        ...(slot.holder === undefined ? {} : { holder: slot.holder }),
        permits: 1,
        ...(slot.fence === undefined ? {} : { sequence: slot.fence }),
        ...(expiresInMs === undefined ? {} : { expiresInMs }),
        isMe: slot.owner !== undefined && this.#mine.has(slot.owner),
      })
    }
    const limit = otherLimit(this.name, this.limit, listing) ?? this.limit
    return { limit, held: holders.length, available: Math.max(0, limit - holders.length), holders, slots }
  }

  async setLimit(): Promise<void> {
    throw new CapabilityError(
      `Cannot change the limit of slots semaphore ${quoteKey(this.name)}: its limit is its number of slots, ` +
        'fixed while any is held. Release every permit, then open it with the new limit everywhere',
      { key: this.name },
    )
  }
}

/** Releases each lock; a failed release ends by its ttl. */
async function releaseAll(locks: readonly Lock[]): Promise<void> {
  await Promise.allSettled(locks.map((lock) => lock.release()))
}
