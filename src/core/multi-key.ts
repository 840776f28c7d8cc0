/**
 * Multi-key locks: several keys held together, taken all or none. The keys are de-duplicated and taken one
 * by one through the normal acquire path (or, with `atomic`, in one step of the store: atomic-acquire.ts)
 * in one global order (their UTF-8 bytes, the order the stores keep
 * keys in), so two callers asking for overlapping sets in any order never wait for each other in a circle:
 * whoever holds the lowest key they share goes first. One deadline and one signal cover the whole
 * acquisition; on any failure every key taken so far is released before the error surfaces. Each key keeps
 * its own lock, renewal and fence; the handle adds one loss signal for all of them.
 */
import { describeValue } from './durations.js'
import {
  BackendUnavailableError,
  CapabilityError,
  LockLostError,
  LockNotAcquiredError,
  quoteKey,
} from './errors.js'
import type { Lock } from './lock.js'
import { ACQUIRE_OPTIONS, type AcquireOptions, assertKnownKeys, validateKey } from './options.js'

/** Options of `acquireAll`, `tryAcquireAll` and `withAll`: an acquire's, shared by every key. */
export interface AcquireAllOptions extends AcquireOptions {
  /**
   * How long to wait for all the keys together (one deadline, not one per key).
   * @default Infinity for acquireAll, 0 for tryAcquireAll
   */
  readonly timeout?: AcquireOptions['timeout']
  /**
   * Take every key in one atomic step of the store instead of one by one in sorted order: no key is held
   * while another is awaited. Offered by the memory and Redis backends (docs/multi-key.md); elsewhere
   * `true` is refused with a `CapabilityError`, before any I/O.
   * @default false
   */
  readonly atomic?: boolean | undefined
}

/** Several keys held together: one lock per key, one loss signal, one release. */
export interface MultiLock extends AsyncDisposable {
  /** The keys held, de-duplicated, in the order they were taken (their UTF-8 bytes). */
  readonly keys: readonly string[]
  /** The lock of each key, each with its own owner, fence, validity and renewal. */
  readonly locks: ReadonlyMap<string, Lock>
  /** The fence of each key: pass each key's to the resource that key protects. */
  readonly fences: ReadonlyMap<string, bigint>
  /**
   * Aborts with a `LockLostError` naming the key when the lease of ANY key is lost: the set is no longer
   * held as a whole. Stop the work that needed all of them, then `release()` the rest. Not aborted by a
   * normal release.
   */
  readonly signal: AbortSignal
  /** Until when (`performance.now()`'s clock) every key is certainly ours: the earliest of their validities. */
  readonly validUntil: number
  /**
   * Releases every key (all at once: the order matters only for taking them); idempotent. Resolves with the
   * keys that were no longer held by then (lost before the release), sorted; empty when all were.
   * @throws {BackendUnavailableError} naming the keys the store could not be told of; they end by their ttl
   */
  release(): Promise<readonly string[]>
}

/** What `acquireAll` needs of its client: checks before any I/O, then the normal acquire of one key. */
export interface MultiKeyRuntime {
  /**
   * Resolves the options and checks every key against the store's limits and the caller's context (no key
   * of an enclosing `withLock`) before any I/O; rejects for the first bad one, and with a `CapabilityError`
   * when `atomic` is asked of a store that cannot take these keys in one step.
   */
  prepare(
    keys: readonly string[],
    options: AcquireOptions,
    defaultTimeoutMs: number,
    atomic: boolean,
  ): Promise<PreparedAll>
}

/** One `acquireAll`, its options resolved. */
export interface PreparedAll {
  readonly timeoutMs: number
  readonly signal: AbortSignal | undefined
  /** The store's id, for messages. */
  readonly backendId: string
  /** Acquires one key through the normal path, waiting at most `timeoutMs`. */
  acquire(key: string, timeoutMs: number): Promise<Lock>
  /** Acquires every key in one atomic step of the store (prepared with `atomic`), a lock per key in order. */
  acquireAtomically(keys: readonly string[]): Promise<readonly Lock[]>
}

const ALL_OPTIONS = [...ACQUIRE_OPTIONS, 'atomic']

/**
 * The keys of a call, checked, de-duplicated and sorted by their UTF-8 bytes: the order every store keeps
 * keys in, and the same in every process whatever the locale (`localeCompare` is not).
 * @throws {TypeError} for a list that is not an array of keys, or is empty, naming the bad key's index
 */
export function sortedKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) {
    throw new TypeError(`Expected \`keys\` to be an array of lock keys, got ${describeValue(keys)}`)
  }
  if (keys.length === 0) {
    throw new TypeError('Expected `keys` to hold at least one lock key, got an empty array')
  }
  for (const [index, key] of keys.entries()) {
    try {
      validateKey(key)
    } catch (error) {
      throw new TypeError(`Bad key at index ${index} of \`keys\`: ${(error as Error).message}`)
    }
  }
  const unique = [...new Set(keys as string[])]
  const bytes = new Map(unique.map((key) => [key, Buffer.from(key)]))
  return unique.sort((a, b) => Buffer.compare(bytes.get(a)!, bytes.get(b)!))
}

/**
 * Acquires every key of `keys` or none: one by one in sorted order, within one deadline. On a failure
 * (timeout, abort, unavailable store, closed client) it releases what it took, then rejects: with
 * `signal.reason` unchanged on an abort, else with an error naming the key it stopped at.
 */
export async function acquireAll(
  runtime: MultiKeyRuntime,
  keys: unknown,
  options: AcquireAllOptions | undefined,
  defaultTimeoutMs: number,
): Promise<MultiLock> {
  const sorted = sortedKeys(keys)
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw new TypeError(`Expected \`options\` to be an object, got ${describeValue(options)}`)
  }
  assertKnownKeys('acquireAll options', options, ALL_OPTIONS)
  const { atomic, ...acquireOptions } = options ?? {}
  if (atomic !== undefined && typeof atomic !== 'boolean') {
    throw new TypeError(`Expected \`atomic\` to be a boolean, got ${describeValue(atomic)}`)
  }
  const prepared = await runtime.prepare(sorted, acquireOptions, defaultTimeoutMs, atomic === true)
  if (atomic) {
    try {
      return new MultiLockHandle(sorted, await prepared.acquireAtomically(sorted))
    } catch (error) {
      throw notAtomically(error, sorted, prepared)
    }
  }
  const deadline = performance.now() + prepared.timeoutMs
  const taken: Lock[] = []
  for (const [index, key] of sorted.entries()) {
    try {
      taken.push(await prepared.acquire(key, Math.max(0, deadline - performance.now())))
    } catch (error) {
      // All or nothing: free what this call took before anyone hears of the failure, so a caller that
      // retries (or another waiter) finds them free at once, not at the end of their leases.
      await Promise.allSettled(taken.reverse().map((lock) => lock.release()))
      throw stoppedAt(error, sorted, index, prepared)
    }
  }
  return new MultiLockHandle(sorted, taken)
}

/** The error of an acquisition that stopped at `sorted[index]`, saying so; an abort's reason unchanged. */
function stoppedAt(error: unknown, sorted: readonly string[], index: number, prepared: PreparedAll): unknown {
  if (prepared.signal?.aborted && error === prepared.signal.reason) return error
  const key = sorted[index]!
  const where =
    `${quoteKey(key)} (key ${index + 1} of ${sorted.length}, in sorted order); ` +
    (index === 0 ? 'no key was taken' : `the ${index} taken before it were released`)
  const context = { key, backend: prepared.backendId, cause: error }
  if (error instanceof LockNotAcquiredError) {
    return new LockNotAcquiredError(
      `Could not acquire all of keys ${sorted.map(quoteKey).join(', ')} on ${prepared.backendId} within the ` +
        `timeout: stopped at ${where}. Retry later, or wait longer`,
      context,
    )
  }
  if (error instanceof BackendUnavailableError) {
    return new BackendUnavailableError(
      `Could not acquire all of keys ${sorted.map(quoteKey).join(', ')}: the store failed at ${where}. ` +
        error.message,
      { ...context, retryable: error.retryable },
    )
  }
  // A closed client, a refused ttl: those errors name the key already.
  return error
}

/** The error of an atomic acquisition, which took nothing: saying so; an abort's reason unchanged. */
function notAtomically(error: unknown, sorted: readonly string[], prepared: PreparedAll): unknown {
  if (prepared.signal?.aborted && error === prepared.signal.reason) return error
  const all = `all of keys ${sorted.map(quoteKey).join(', ')} in one atomic step on ${prepared.backendId}`
  const context = { key: sorted[0], backend: prepared.backendId, cause: error }
  if (error instanceof LockNotAcquiredError) {
    return new LockNotAcquiredError(
      `Could not acquire ${all} within the timeout: at least one was held by another owner the whole time, ` +
        'and no key was taken. Retry later, or wait longer',
      context,
    )
  }
  if (error instanceof BackendUnavailableError) {
    return new BackendUnavailableError(
      `Could not acquire ${all}: no key is held by this call. ${error.message}`,
      {
        ...context,
        retryable: error.retryable,
      },
    )
  }
  return error
}

/**
 * Why `atomic` cannot be had on `backendId`, as the `CapabilityError` of an acquisition asking for it:
 * `reason` is the store's own, or absent where it offers no atomic step at all.
 */
export function atomicRefusal(keys: readonly string[], backendId: string, reason?: string): CapabilityError {
  return new CapabilityError(
    `Cannot take keys ${keys.map(quoteKey).join(', ')} in one atomic step on ${backendId}: ` +
      `${reason ?? 'this backend offers no atomic multi-key acquisition'}. Leave \`atomic\` out to take them ` +
      'one by one in sorted order, which is all-or-nothing and deadlock-free too (see docs/multi-key.md)',
    { key: keys[0], backend: backendId },
  )
}

/** Locks held together (a multi-key lock, a slots semaphore's permits): one loss signal, one release. */
export class MultiLockHandle implements MultiLock {
  readonly keys: readonly string[]
  readonly locks: ReadonlyMap<string, Lock>
  readonly fences: ReadonlyMap<string, bigint>
  readonly #lost = new AbortController()
  readonly #detach: Array<() => void> = []
  #releasing: Promise<readonly string[]> | undefined
  /** What the locks are, for messages: "the multi-key lock on 'a', 'b'". */
  readonly #subject: string

  constructor(keys: readonly string[], locks: readonly Lock[], subject?: string) {
    this.keys = keys
    this.#subject = subject ?? `the multi-key lock on ${keys.map(quoteKey).join(', ')}`
    this.locks = new Map(locks.map((lock) => [lock.key, lock]))
    this.fences = new Map(locks.map((lock) => [lock.key, lock.fence]))
    for (const lock of locks) {
      // One read of the signal: a second one past the lock's validity could abort it in between.
      const signal = lock.signal
      const onLost = () => this.#markLost(lock, signal.reason)
      if (signal.aborted) onLost()
      else {
        signal.addEventListener('abort', onLost, { once: true })
        this.#detach.push(() => signal.removeEventListener('abort', onLost))
      }
    }
  }

  #markLost(lock: Lock, reason: unknown): void {
    if (this.#lost.signal.aborted || this.#releasing) return
    this.#lost.abort(
      new LockLostError(
        `${this.#subject[0]!.toUpperCase()}${this.#subject.slice(1)} lost ${quoteKey(lock.key)}: ` +
          `${(reason as Error)?.message ?? 'its lease ended'}. The keys are no longer held together: stop the ` +
          'work that needed all of them, and release() the rest',
        { key: lock.key, backend: (reason as LockLostError)?.backend, cause: reason },
      ),
    )
  }

  get signal(): AbortSignal {
    // Each lock's getter declares a lease past its validity lost at once (its listener above aborts ours).
    if (!this.#releasing) for (const lock of this.locks.values()) void lock.signal
    return this.#lost.signal
  }

  get validUntil(): number {
    return Math.min(...[...this.locks.values()].map((lock) => lock.validUntil))
  }

  release(): Promise<readonly string[]> {
    this.#releasing ??= this.#release()
    return this.#releasing
  }

  async #release(): Promise<readonly string[]> {
    for (const detach of this.#detach.splice(0)) detach()
    const locks = [...this.locks.values()]
    // Read before releasing: a released lock's signal never aborts, a lost one's already has.
    const gone = locks.filter((lock) => lock.signal.aborted).map((lock) => lock.key)
    const outcomes = await Promise.allSettled(locks.map((lock) => lock.release()))
    const failed = locks.filter((_, i) => outcomes[i]!.status === 'rejected')
    if (failed.length > 0) {
      const first = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult
      throw new BackendUnavailableError(
        `Could not release ${failed.map((lock) => quoteKey(lock.key)).join(', ')} of ${this.#subject}; ` +
          'the others were released, these end by themselves within ' +
          `their ttl. ${(first.reason as Error)?.message ?? ''}`,
        {
          key: failed[0]!.key,
          backend: (first.reason as BackendUnavailableError)?.backend,
          cause: first.reason,
        },
      )
    }
    return gone
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release()
  }
}
