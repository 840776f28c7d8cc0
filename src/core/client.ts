/**
 * The lock client: the public façade over one backend (acquire, tryAcquire, withLock, inspect, list,
 * break, close). It
 * validates, tracks held locks and pending acquires for `close`, and hands each acquire to the acquire
 * loop (acquire-loop.ts).
 */
import { AsyncLocalStorage } from 'node:async_hooks'
import { setMaxListeners } from 'node:events'
import { linkedAbort, raceSignal } from './abort.js'
import { type AcquireContext, acquireLoop } from './acquire-loop.js'
import { acquireAtomically } from './atomic-acquire.js'
import { AttemptTimeout, attemptBounds, unavailableError } from './attempt.js'
import type {
  BreakResult,
  ElectionFacet,
  LeaseFacet,
  ListedLock,
  LockBackend,
  LockInfo,
  RwLockFacet,
  SemaphoreFacet,
} from './backend.js'
import { sleep } from './clock.js'
import { describeValue } from './durations.js'
import { type Election, ElectionImpl, type ElectionRuntime } from './election.js'
import {
  CapabilityError,
  ClientClosedError,
  LockError,
  LockNotAcquiredError,
  type Primitive,
  quoteKey,
} from './errors.js'
import { whileHeld } from './holding.js'
import { type Lock, type LockHandle, lockRenewals } from './lock.js'
import {
  type AcquireAllOptions,
  acquireAll,
  atomicRefusal,
  type MultiKeyRuntime,
  type MultiLock,
} from './multi-key.js'
import {
  ACQUIRE_OPTIONS,
  assertKnownKeys,
  type ClientOptions,
  checkLimits,
  LOCK_OPTIONS,
  type LockOptions,
  type ResolvedAcquireOptions,
  type ResolvedClientOptions,
  resolveAcquireOptions,
  resolveClientOptions,
  validateKey,
  validateListPrefix,
} from './options.js'
import { type ResumeOptions, type ResumeRuntime, resumeLock } from './resume.js'
import { type RwLock, RwLockImpl, type RwLockRuntime } from './rwlock.js'
import {
  parseLayout,
  parseLimit,
  type Semaphore,
  SemaphoreImpl,
  type SemaphoreOptions,
  type SemaphoreRuntime,
} from './semaphore.js'
import {
  type PreparedSlots,
  type SlotsRuntime,
  type SlotsSemaphore,
  SlotsSemaphoreImpl,
  slotKey,
  slotPrefix,
} from './slots.js'

/** A lock client over one backend. Create it with `createLockClient` (src/client.ts). */
export interface LockClient extends AsyncDisposable {
  /**
   * Takes `key`, waiting while someone else holds it.
   * @throws {LockNotAcquiredError} when `timeout` passes while the lock is held elsewhere
   * @throws {BackendUnavailableError} when the store cannot be reached
   * @throws `signal.reason` when `signal` aborts
   */
  acquire(key: string, options?: LockOptions): Promise<Lock>
  /** Like `acquire` with `timeout` 0 by default; resolves `null` instead of throwing when held elsewhere. */
  tryAcquire(key: string, options?: LockOptions): Promise<Lock | null>
  /** Runs `fn` while holding `key` and always releases afterwards; resolves with what `fn` returns. */
  withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>, options?: LockOptions): Promise<T>
  /**
   * Takes every key of `keys` or none (docs/multi-key.md): de-duplicated, one by one in the order of their
   * UTF-8 bytes, so overlapping sets asked in any order never deadlock; `timeout` and `signal` cover them all.
   * On any failure the keys taken are released before it rejects.
   * @example
   * await using all = await locks.acquireAll(['acct:7', 'acct:1'], { timeout: '5s' })
   * console.log(all.fences.get('acct:1'), all.fences.get('acct:7'))
   * @throws {LockNotAcquiredError} naming the key still held elsewhere when `timeout` passed
   * @throws {CapabilityError} for `atomic: true` where the backend cannot take the keys in one step
   * @throws `signal.reason` when `signal` aborts
   */
  acquireAll(keys: readonly string[], options?: AcquireAllOptions): Promise<MultiLock>
  /** Like `acquireAll` with `timeout` 0 by default; resolves `null` instead of throwing when a key is held elsewhere. */
  tryAcquireAll(keys: readonly string[], options?: AcquireAllOptions): Promise<MultiLock | null>
  /** Runs `fn` while holding every key of `keys` and always releases them afterwards, as `withLock` does one. */
  withAll<T>(
    keys: readonly string[],
    fn: (all: MultiLock) => T | Promise<T>,
    options?: AcquireAllOptions,
  ): Promise<T>
  /**
   * Who holds `key`, as far as the store says now. Diagnostic only: never decide who may act on it.
   * @throws {BackendUnavailableError} when the store fails, or has not answered within 5 s
   */
  inspect(key: string, options?: { readonly signal?: AbortSignal | undefined }): Promise<LockInfo>
  /**
   * The locks held now whose keys start with `prefix` ('' or nothing: every one), as `inspect` sees each,
   * a page of the store at a time, in no set order. Diagnostic only, like `inspect`.
   * @throws {CapabilityError} on a backend that cannot enumerate its locks
   */
  list(prefix?: string, options?: { readonly signal?: AbortSignal | undefined }): AsyncIterable<ListedLock>
  /**
   * Frees `key` whoever holds it, for an operator whose holder is stuck (a hung process that still renews,
   * or one that died on a store that keeps its lease for the ttl). The fence is kept: the next grant's is
   * greater. The holder finds out at its next renewal (its `lock.signal` aborts); until then it may still
   * act, so a resource that checks fences is what makes breaking safe. It ends at most the grant it first
   * reads, never one granted after that read (a waiter that took the key meanwhile keeps it). With `fence`,
   * only that grant is broken (a lock re-taken since is left alone).
   * @throws {CapabilityError} on a backend that cannot break locks
   */
  break(
    key: string,
    options?: { readonly fence?: bigint | undefined; readonly signal?: AbortSignal | undefined },
  ): Promise<BreakResult>
  /**
   * Stops renewers, releases held locks (best effort; their holders see lock.signal abort), rejects pending
   * acquires, and closes the backend, which closes only what it opened itself (never your driver client).
   * Never rejects, and returns within about 3 s even when the store does not answer: what it could not
   * release then ends by its ttl.
   */
  close(): Promise<void>
  /**
   * The election called `name` (the same object for the same name): campaign to lead it, observe who leads.
   * Names are checked as keys are; the store is first used by a campaign or a read.
   * @throws {TypeError} for a bad name
   */
  election(name: string): Election
  /**
   * The semaphore called `name`, allowing `limit` permits at once: acquire permits, inspect its holders,
   * change its limit. Every client must open it with the limit the store keeps while it is in use. With
   * `layout: 'slots'`, `limit` exclusive slots on any store, each permit carrying its slot's fence.
   * Names are checked as keys are; the store is first used by an acquire or a read.
   * @throws {TypeError} for a bad name or limit
   */
  semaphore(name: string, options: SemaphoreOptions & { readonly layout: 'slots' }): SlotsSemaphore
  semaphore(name: string, options: SemaphoreOptions): Semaphore
  /**
   * The lock `token` (from `lock.token()`, in this process or another) names, held again by this client: one
   * read and one owner-checked extend, then renewed and released like any lock. See docs/resume.md.
   * @example
   * await using resumed = await locks.resume(process.env.LOCK_TOKEN ?? '')
   * @throws {LockLostError} when the lease has ended (expired, released, taken over) since the token was made
   * @throws {TypeError} for a damaged token, or one made on another store
   * @throws {CapabilityError} on a backend that cannot hand a lease to another process (docs/resume.md)
   */
  resume(token: string, options?: ResumeOptions): Promise<Lock>
  /**
   * The read-write lock called `name`: readers share it, a writer holds it alone, in one line in arrival
   * order (a queued writer is never passed by later readers). Names are checked as keys are.
   * @throws {TypeError} for a bad name
   */
  rwlock(name: string): RwLock
  /** The backend's id, e.g. `file:///var/lock/fencelock`. Undefined until a URL-configured backend has loaded. */
  readonly backendId: string | undefined
}

/**
 * How long `close` waits in all for the store: the releases of held locks, the clean-ups of acquires it
 * interrupted, and the backend's own close. A hung store must not hang close(); what it could not release
 * ends by its ttl.
 */
const CLOSE_WAIT_MS = 3000

/**
 * How long `inspect` and each page of `list` wait for the store: a diagnostic must not hang on a store
 * that never answers.
 */
const INSPECT_WAIT_MS = 5000

/** The options a semaphore's acquire knows: an acquire's, and how many permits. */
const PERMIT_OPTIONS = [...ACQUIRE_OPTIONS, 'permits']
/** How long `break` waits for the store: a read and a conditional write, again if the lock changed meanwhile. */
const BREAK_WAIT_MS = 15_000

/** Waits for `work` until `deadline` (performance.now()), never rejecting. */
async function until(deadline: number, work: Promise<unknown>): Promise<void> {
  const stop = new AbortController()
  try {
    await Promise.race([work.catch(() => {}), sleep(Math.max(0, deadline - performance.now()), stop.signal)])
  } finally {
    stop.abort()
  }
}

/**
 * A lock client over `backend`, or over the backend `load` makes (called once the options are known to be
 * good, so a bad option never leaves a loading module's failure unreported). The public
 * `createLockClient` (src/client.ts) turns a URL into such a `load`; the core names no backend.
 * @throws {TypeError} for a bad option or something that is not a backend
 */
export function clientOver(
  backend: LockBackend | (() => Promise<LockBackend>),
  options?: ClientOptions,
): LockClient {
  const resolved = resolveClientOptions(options)
  if (typeof backend === 'function') {
    const loading = backend()
    // Surfaced by the first operation; this only keeps an unused failure from being "unhandled".
    loading.catch(() => {})
    return new Client(loading, resolved)
  }
  if (typeof backend !== 'object' || backend === null || typeof backend.tryAcquire !== 'function') {
    throw new TypeError('Expected a backend URL string or a LockBackend object as the first argument')
  }
  return new Client(Promise.resolve(backend), resolved, backend.id)
}

/**
 * One shape on every backend: `{ held: false }` for nothing known, and `expiresInMs` in whole ms, never
 * negative (stores measure it on clocks of their own, some with fractions).
 */
function normalized(info: LockInfo | null): LockInfo {
  if (!info) return { held: false }
  if (info.expiresInMs === undefined) return info
  return { ...info, expiresInMs: Math.max(0, Math.floor(info.expiresInMs)) }
}

class Client implements LockClient {
  readonly #backend: Promise<LockBackend>
  readonly #options: ResolvedClientOptions
  readonly #closing = new AbortController()
  readonly #held = new Set<LockHandle>()
  /** One timer for the renewals and expiries of every lock this client holds. */
  readonly #renewals = lockRenewals()
  /** One timer for the bounds of every attempt this client makes. */
  readonly #bounds = attemptBounds()
  /** Acquires under way. */
  readonly #running = new Set<Promise<unknown>>()
  /** Clean-ups of failed acquires still running: `close` lets them finish (bounded) before closing the store. */
  readonly #cleanups = new Set<Promise<unknown>>()
  #backendId: string | undefined
  /** The backend once loaded: an acquire then goes straight on, without awaiting the loading. */
  #loaded: LockBackend | undefined
  /** `acquire(key)`'s options, resolved once: no options is the common call. */
  readonly #plainAcquire: ResolvedAcquireOptions
  #closed: Promise<void> | undefined
  /**
   * The keys whose `withLock` the current async context runs inside. Locks are not reentrant: an acquire
   * of one of them there waits for itself, so it fails at once instead. Only this case is certain: another
   * task of the same client may well release a key this client holds.
   */
  readonly #insideWithLock = new AsyncLocalStorage<ReadonlySet<string>>()
  /** The acquire context of each backend or facet acquired on (`#contextOf`). */
  readonly #contexts = new WeakMap<LeaseFacet, AcquireContext>()
  /** One object per election name, so that `isMe` knows every leadership of this client. */
  readonly #elections = new Map<string, ElectionImpl>()
  /** One object per semaphore name (the latest limit it was opened with), so that `isMe` knows this client's leases. */
  readonly #semaphores = new Map<string, SemaphoreImpl | SlotsSemaphoreImpl>()

  constructor(backend: Promise<LockBackend>, options: ResolvedClientOptions, backendId?: string) {
    this.#backendId = backendId
    // Every pending acquire listens to this signal; dozens at once are normal, not a leak.
    setMaxListeners(0, this.#closing.signal)
    this.#backend = backend.then((b) => {
      this.#backendId = b.id
      this.#loaded = b
      return b
    })
    this.#backend.catch(() => {})
    this.#options = options
    this.#plainAcquire = Object.freeze(
      resolveAcquireOptions(undefined, options, options.timeoutMs, LOCK_OPTIONS),
    )
  }

  get backendId(): string | undefined {
    return this.#backendId
  }

  acquire(key: string, options?: LockOptions): Promise<Lock> {
    // Not `async`: an async function returning the loop's promise would add a promise and its
    // resolution jobs to every acquire. A bad argument still rejects, never throws.
    try {
      validateKey(key)
      const opts =
        options === undefined
          ? this.#plainAcquire
          : resolveAcquireOptions(options, this.#options, this.#options.timeoutMs, LOCK_OPTIONS)
      this.#refuseSelfDeadlock(key)
      return this.#acquire(key, opts)
    } catch (error) {
      return Promise.reject(error)
    }
  }

  async tryAcquire(key: string, options?: LockOptions): Promise<Lock | null> {
    validateKey(key)
    const opts = resolveAcquireOptions(options, this.#options, 0, LOCK_OPTIONS)
    this.#refuseSelfDeadlock(key)
    try {
      return await this.#acquire(key, opts)
    } catch (error) {
      if (error instanceof LockNotAcquiredError) return null
      throw error
    }
  }

  async withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>, options?: LockOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const lock = await this.acquire(key, options)
    const inside = new Set(this.#insideWithLock.getStore())
    inside.add(key)
    return whileHeld(
      lock,
      () => lock.release(),
      () => this.#insideWithLock.run(inside, () => fn(lock)),
    )
  }

  acquireAll(keys: readonly string[], options?: AcquireAllOptions): Promise<MultiLock> {
    return acquireAll(this.#multiKeyRuntime, keys, options, this.#options.timeoutMs)
  }

  async tryAcquireAll(keys: readonly string[], options?: AcquireAllOptions): Promise<MultiLock | null> {
    try {
      return await acquireAll(this.#multiKeyRuntime, keys, options, 0)
    } catch (error) {
      if (error instanceof LockNotAcquiredError) return null
      throw error
    }
  }

  async withAll<T>(
    keys: readonly string[],
    fn: (all: MultiLock) => T | Promise<T>,
    options?: AcquireAllOptions,
  ): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const all = await this.acquireAll(keys, options)
    const inside = new Set([...(this.#insideWithLock.getStore() ?? []), ...all.keys])
    return whileHeld(
      all,
      async () => void (await all.release()),
      () => this.#insideWithLock.run(inside, () => fn(all)),
    )
  }

  /** What multi-key locks use of this client: its checks before any I/O, and the acquire of one key. */
  readonly #multiKeyRuntime: MultiKeyRuntime = {
    prepare: async (keys, options, defaultTimeoutMs, atomic) => {
      const opts = resolveAcquireOptions(options, this.#options, defaultTimeoutMs)
      for (const key of keys) this.#refuseSelfDeadlock(key)
      const backend = await this.#open(keys[0]!, opts.ttlMs)
      for (const key of keys) checkLimits(backend, key, opts.ttlMs)
      const facet = backend.multiKey
      if (atomic) {
        const reason = facet ? facet.refusal?.(keys) : backend.multiKeyRefusal
        if (!facet || reason !== undefined) throw atomicRefusal(keys, backend.id, reason)
      }
      return {
        timeoutMs: opts.timeoutMs,
        signal: opts.signal,
        backendId: backend.id,
        acquire: (key, timeoutMs) => this.#acquire(key, { ...opts, timeoutMs }),
        acquireAtomically: (sorted) =>
          this.#tracked(opts, (signal) =>
            acquireAtomically(this.#contextOf(backend, undefined), facet!, sorted, opts, signal),
          ),
      }
    },
  }

  #refuseSelfDeadlock(key: string): void {
    if (!this.#insideWithLock.getStore()?.has(key)) return
    throw new LockError(
      'FENCELOCK_SELF_DEADLOCK',
      `Cannot acquire lock ${quoteKey(key)} inside withLock(${quoteKey(key)}) of the same client: locks are not ` +
        'reentrant, so it would wait for itself for ever. Use the lock withLock passes to its function',
      { key },
    )
  }

  async inspect(key: string, options?: { readonly signal?: AbortSignal | undefined }): Promise<LockInfo> {
    validateKey(key)
    const backend = await this.#open(key)
    return normalized(
      await this.#bounded(backend, key, 'inspect', INSPECT_WAIT_MS, options?.signal, (signal) =>
        backend.inspect(key, signal),
      ),
    )
  }

  /**
   * One request of an operation that is not an acquire, bounded by `ms` and the caller's and the client's
   * signals: a silent store fails it as unavailable, the caller's abort rejects with its reason unchanged.
   */
  async #bounded<T>(
    backend: LeaseFacet,
    key: string,
    what: string,
    ms: number,
    callerSignal: AbortSignal | undefined,
    run: (signal: AbortSignal) => Promise<T>,
    primitive?: Primitive,
  ): Promise<T> {
    const link = linkedAbort(callerSignal, this.#closing.signal)
    const timer = setTimeout(() => link.abort(new AttemptTimeout(ms)), ms)
    try {
      return await raceSignal(run(link.signal), link.signal)
    } catch (error) {
      if (callerSignal?.aborted && error === callerSignal.reason) throw error
      throw unavailableError(backend, key, error, what, primitive)
    } finally {
      clearTimeout(timer)
      link.dispose()
    }
  }

  async *list(
    prefix = '',
    options?: { readonly signal?: AbortSignal | undefined },
  ): AsyncGenerator<ListedLock, void, undefined> {
    validateListPrefix(prefix)
    // A prefix is checked as a key would be (its length, its NULs): no key could start with a bad one.
    const backend = await this.#open(prefix === '' ? 'x' : prefix)
    if (!backend.list) {
      throw new CapabilityError(
        `Cannot list the locks of ${backend.id}: this backend cannot enumerate its store. Use inspect(key) for a known key`,
        { backend: backend.id },
      )
    }
    // Each page is bounded on its own; the listing as a whole takes as many pages as the store has.
    const listing = linkedAbort(options?.signal, this.#closing.signal)
    const pages = backend.list(prefix, listing.signal)[Symbol.asyncIterator]()
    let pending = false
    try {
      for (;;) {
        pending = true
        const next = await this.#bounded(
          backend,
          prefix,
          'list the locks under',
          INSPECT_WAIT_MS,
          options?.signal,
          () => pages.next(),
        )
        pending = false
        if (next.done) return
        yield normalized(next.value) as ListedLock
      }
    } finally {
      // Stopped early (a `break` out of the loop) the backend's listing ends at once; after a page that
      // failed or never came, it is told to stop, and not waited for (a generator ends only between pages).
      if (pending) {
        listing.abort(new Error('the listing was given up'))
        pages.return?.().catch(() => {})
      } else await pages.return?.()
      listing.dispose()
    }
  }

  async break(
    key: string,
    options?: { readonly fence?: bigint | undefined; readonly signal?: AbortSignal | undefined },
  ): Promise<BreakResult> {
    validateKey(key)
    const fence = options?.fence
    if (fence !== undefined && (typeof fence !== 'bigint' || fence < 1n)) {
      throw new TypeError(`Expected \`fence\` to be a positive bigint (a lock's fence), got ${String(fence)}`)
    }
    const backend = await this.#open(key)
    if (!backend.breakLock) {
      throw new CapabilityError(
        `Cannot break lock ${quoteKey(key)}: ${backend.id} has no way to break locks`,
        {
          key,
          backend: backend.id,
        },
      )
    }
    return this.#bounded(backend, key, 'break', BREAK_WAIT_MS, options?.signal, (signal) =>
      backend.breakLock!(key, { fence, signal }),
    )
  }

  resume(token: string, options?: ResumeOptions): Promise<Lock> {
    return resumeLock(token, options, this.#resumeRuntime)
  }

  readonly #resumeRuntime: ResumeRuntime = {
    open: (key) => this.#open(key),
    context: (backend) => this.#contextOf(backend, undefined),
    bounded: (backend, key, signal, run) => this.#bounded(backend, key, 'resume', BREAK_WAIT_MS, signal, run),
    renews: () => this.#options.renew,
  }

  election(name: string): Election {
    validateKey(name)
    let election = this.#elections.get(name)
    if (!election) {
      election = new ElectionImpl(name, this.#electionRuntime)
      this.#elections.set(name, election)
    }
    return election
  }

  /** What elections use of this client: its checks, its acquire loop and bounded reads, on the facet. */
  readonly #electionRuntime: ElectionRuntime = {
    facet: (name, ttlMs) => this.#openElection(name, ttlMs),
    campaign: async (name, options, value) => {
      const { value: _value, ...acquireOptions } = options ?? {}
      const opts = { ...resolveAcquireOptions(acquireOptions, this.#options, Infinity), value }
      const facet = await this.#openElection(name, opts.ttlMs)
      return this.#acquire(name, opts, facet, 'election')
    },
    inspect: async (name, signal) => {
      const facet = await this.#openElection(name)
      return normalized(
        await this.#bounded(
          facet,
          name,
          'read',
          INSPECT_WAIT_MS,
          signal,
          (s) => facet.inspect(name, s),
          'election',
        ),
      )
    },
    closing: this.#closing.signal,
  }

  semaphore(name: string, options: SemaphoreOptions & { readonly layout: 'slots' }): SlotsSemaphore
  semaphore(name: string, options: SemaphoreOptions): Semaphore
  semaphore(name: string, options: SemaphoreOptions): Semaphore {
    validateKey(name)
    if (typeof options !== 'object' || options === null) {
      throw new TypeError(
        `Expected semaphore ${quoteKey(name)}'s options to be an object with its \`limit\`, got ${describeValue(options)}`,
      )
    }
    assertKnownKeys('semaphore options', options, ['limit', 'layout'])
    const limit = parseLimit(name, options?.limit)
    const layout = parseLayout(name, options.layout)
    const Kind = layout === 'slots' ? SlotsSemaphoreImpl : SemaphoreImpl
    // The same object for the same name, limit and layout, so that `isMe` knows every lease of this client.
    let semaphore = this.#semaphores.get(name)
    if (semaphore?.limit !== limit || !(semaphore instanceof Kind)) {
      semaphore =
        layout === 'slots'
          ? new SlotsSemaphoreImpl(name, limit, this.#slotsRuntime)
          : new SemaphoreImpl(name, limit, this.#semaphoreRuntime)
      this.#semaphores.set(name, semaphore)
    }
    return semaphore
  }

  /** What slots semaphores use of this client: its checks, the normal acquire of one slot, one listing. */
  readonly #slotsRuntime: SlotsRuntime = {
    prepare: async (name, limit, options, defaultTimeoutMs): Promise<PreparedSlots> => {
      const opts = resolveAcquireOptions(options, this.#options, defaultTimeoutMs)
      // The longest slot key, checked as any key against the store's limits, before any I/O.
      const backend = await this.#open(slotKey(name, limit, limit - 1), opts.ttlMs)
      this.#slotListing(backend, name)
      const link = linkedAbort(opts.signal, this.#closing.signal)
      const once = { ...opts, timeoutMs: 0, signal: link.signal }
      return {
        timeoutMs: opts.timeoutMs,
        signal: link.signal,
        dispose: () => link.dispose(),
        backendId: backend.id,
        tryHeld: backend.capabilities.expiry !== 'session',
        take: async (key) => {
          try {
            return await this.#acquire(key, once)
          } catch (error) {
            if (error instanceof LockNotAcquiredError) return null
            throw error
          }
        },
      }
    },
    list: async (name, signal) => {
      const backend = await this.#open(name)
      const list = this.#slotListing(backend, name)
      return this.#bounded(
        backend,
        name,
        'list the slots of',
        INSPECT_WAIT_MS,
        signal,
        async (s) => {
          const slots: ListedLock[] = []
          for await (const slot of list(slotPrefix(name), s)) slots.push(slot)
          return slots
        },
        'semaphore',
      )
    },
  }

  /** The backend's listing, which slots wait on. @throws {CapabilityError} where it has none */
  #slotListing(backend: LockBackend, name: string): NonNullable<LockBackend['list']> {
    if (backend.list) return backend.list.bind(backend)
    throw new CapabilityError(
      `Cannot use slots semaphore ${quoteKey(name)} on ${backend.id}: its waiters list the slots, and this ` +
        'backend cannot enumerate its store',
      { key: name, backend: backend.id },
    )
  }

  /** What semaphores use of this client: its checks, its acquire loop and bounded calls, on the facet. */
  readonly #semaphoreRuntime: SemaphoreRuntime = {
    facet: async (name, ttlMs) => this.#semaphoreFacet(await this.#open(name, ttlMs), name),
    acquire: async (name, options, request, defaultTimeoutMs) => {
      assertKnownKeys('semaphore acquire options', options, PERMIT_OPTIONS)
      const { permits: _permits, ...acquireOptions } = options ?? {}
      const opts = {
        ...resolveAcquireOptions(acquireOptions, this.#options, defaultTimeoutMs),
        semaphore: request,
      }
      const facet = this.#semaphoreFacet(await this.#open(name, opts.ttlMs), name)
      return this.#acquire(name, opts, facet, 'semaphore')
    },
    call: async (name, kind, signal, fn) => {
      const facet = this.#semaphoreFacet(await this.#open(name), name)
      const [what, waitMs] = kind === 'read' ? ['read', INSPECT_WAIT_MS] : ['write', BREAK_WAIT_MS]
      return this.#bounded(facet, name, what, waitMs, signal, (s) => fn(facet, s), 'semaphore')
    },
  }

  rwlock(name: string): RwLock {
    validateKey(name)
    return new RwLockImpl(name, this.#rwlockRuntime)
  }

  /** What read-write locks use of this client: its checks, its acquire loop and bounded reads, on the facet. */
  readonly #rwlockRuntime: RwLockRuntime = {
    acquire: async (name, options, request, defaultTimeoutMs) => {
      const timeoutMs = defaultTimeoutMs ?? this.#options.timeoutMs
      const opts = { ...resolveAcquireOptions(options, this.#options, timeoutMs), rwlock: request }
      const facet = this.#rwlockFacet(await this.#open(name, opts.ttlMs), name)
      return { lock: await this.#acquire(name, opts, facet, 'rwlock'), facet }
    },
    read: async (name, signal, fn) => {
      const facet = this.#rwlockFacet(await this.#open(name), name)
      return this.#bounded(facet, name, 'read', INSPECT_WAIT_MS, signal, (s) => fn(facet, s), 'rwlock')
    },
    mine: new Set(),
  }

  #rwlockFacet(backend: LockBackend, name: string): RwLockFacet {
    if (backend.rwlock) return backend.rwlock
    throw new CapabilityError(
      `Cannot use read-write lock ${quoteKey(name)} on ${backend.id}: this backend offers no read-write lock. ` +
        'Use a backend that does, or a plain lock (see docs/rwlock.md)',
      { key: name, backend: backend.id },
    )
  }

  #semaphoreFacet(backend: LockBackend, name: string): SemaphoreFacet {
    if (backend.semaphore) return backend.semaphore
    throw new CapabilityError(
      `Cannot use semaphore ${quoteKey(name)} on ${backend.id}: this backend offers no counting semaphore. ` +
        "Open it with { layout: 'slots' } (limit exclusive slots, each permit a fence, on every store), or " +
        'use a backend that counts (see docs/semaphore.md)',
      { key: name, backend: backend.id },
    )
  }

  /** The election facet, its name and ttl checked against the facet's own limits (its namespace's). */
  async #openElection(name: string, ttlMs?: number): Promise<ElectionFacet> {
    const backend = await this.#open(name, ttlMs, false)
    const facet = this.#electionFacet(backend, name)
    checkLimits(facet.limits ? facet : backend, name, ttlMs)
    return facet
  }

  #electionFacet(backend: LockBackend, name: string): ElectionFacet {
    if (backend.election) return backend.election
    throw new CapabilityError(
      `Cannot run election ${quoteKey(name)} on ${backend.id}: this backend offers no leader election. ` +
        'Use a backend that does (see docs/election.md), or a lock whose holder leads',
      { key: name, backend: backend.id },
    )
  }

  async close(): Promise<void> {
    this.#closed ??= (async () => {
      const deadline = performance.now() + CLOSE_WAIT_MS
      this.#closing.abort(new ClientClosedError('The lock client was closed while this call was pending'))
      // Holders still at work are told through lock.signal; releases already under way are awaited.
      await until(deadline, Promise.allSettled([...this.#held].map((lock) => lock.closeWithClient())))
      // The acquires this close rejects start their clean-up as they end (an abort ends them at once).
      await until(deadline, Promise.allSettled([...this.#running]))
      // Acquires the close just rejected may hold what an attempt in flight took: their clean-up needs
      // the backend open.
      if (this.#cleanups.size > 0) await until(deadline, Promise.allSettled([...this.#cleanups]))
      // The backend closes only what it opened itself (its own connections, a subscriber), never a
      // driver client the user handed it. A failure to close a connection leaves nothing to do: ignored.
      const backend = await this.#backend.catch(() => undefined)
      if (backend) await until(Math.max(deadline, performance.now() + 500), backend.close())
    })()
    return this.#closed
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close()
  }

  async #open(key: string, ttlMs?: number, check = true): Promise<LockBackend> {
    if (this.#closing.signal.aborted) {
      throw new ClientClosedError(`Cannot use lock ${quoteKey(key)}: the lock client is closed`, { key })
    }
    const backend = await this.#backend
    // Before any I/O: a key or a ttl the store cannot represent is the caller's mistake, not an outage.
    if (check) checkLimits(backend, key, ttlMs)
    return backend
  }

  /** The acquire context of `backend` (a facet serves one primitive): made once, shared by its acquires and locks. */
  #contextOf(backend: LeaseFacet, primitive: Primitive | undefined): AcquireContext {
    let ctx = this.#contexts.get(backend)
    if (!ctx) {
      const held = this.#held
      ctx = {
        backend,
        driftFactor: this.#options.driftFactor,
        held,
        renewals: this.#renewals,
        bounds: this.#bounds,
        cleanups: this.#cleanups,
        primitive,
        onSettled: (lock) => held.delete(lock),
      }
      this.#contexts.set(backend, ctx)
    }
    return ctx
  }

  /**
   * Runs the acquire loop (acquire-loop.ts) on this client's backend (or on `facet`, one of its
   * primitives'), tracked for `close`. Not `async`: once the backend has loaded, an acquire goes straight
   * to the loop, without two more promises and their turns; a bad argument still rejects, never throws.
   */
  #acquire(
    key: string,
    opts: ResolvedAcquireOptions,
    facet?: LeaseFacet,
    primitive?: Primitive,
  ): Promise<LockHandle> {
    try {
      if (facet) return this.#acquireOn(facet, key, opts, primitive)
      const loaded = this.#loaded
      if (loaded === undefined || this.#closing.signal.aborted) {
        return this.#open(key, opts.ttlMs).then((backend) => this.#acquireOn(backend, key, opts, primitive))
      }
      checkLimits(loaded, key, opts.ttlMs)
      return this.#acquireOn(loaded, key, opts, primitive)
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /** `#acquire` on `backend`, loaded. @throws {CapabilityError} for what the backend cannot do */
  #acquireOn(
    backend: LeaseFacet,
    key: string,
    opts: ResolvedAcquireOptions,
    primitive: Primitive | undefined,
  ): Promise<LockHandle> {
    if (opts.resumable && !(backend as LockBackend).resume) {
      throw new CapabilityError(
        `Cannot acquire resumable lock ${quoteKey(key)} on ${backend.id}: this backend cannot hand a lease to ` +
          'another process. Acquire it without `resumable`; docs/resume.md lists the stores that can',
        { key, backend: backend.id },
      )
    }
    const ctx = this.#contextOf(backend, primitive)
    return this.#tracked(opts, (signal) => acquireLoop(ctx, key, opts, signal))
  }

  /** Runs an acquisition under the caller's and the client's signals, tracked for `close`. */
  async #tracked<T>(opts: ResolvedAcquireOptions, acquire: (signal: AbortSignal) => Promise<T>): Promise<T> {
    // Without a caller's signal the client-wide one serves as is: no controller on the uncontended path.
    const link = opts.signal ? linkedAbort(opts.signal, this.#closing.signal) : undefined
    const run = acquire(link?.signal ?? this.#closing.signal)
    // Tracked until it ends, so that close() knows when the acquires it rejects have started their clean-up
    // (close() settles on `run` itself; its own rejection is handled below).
    this.#running.add(run)
    try {
      return await run
    } catch (error) {
      // Rejected by close(): settle once close() has done its work, so that `await client.close()` and then
      // handling this rejection (a common order) never leaves it unhandled for a turn of the event loop.
      if (this.#closed && error === this.#closing.signal.reason) await this.#closed.catch(() => {})
      throw error
    } finally {
      this.#running.delete(run)
      link?.dispose()
    }
  }
}
