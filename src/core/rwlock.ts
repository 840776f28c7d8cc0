/**
 * Read-write locks: one line of readers and writers per name, each acquire one lease that the core renews,
 * releases and declares lost exactly as a lock's (`read` and `write` run the acquire loop on the backend's
 * rwlock facet, with the mode on the request). The store decides who is granted: a reader when no writer
 * is ahead of it in line, a writer when it is first, so a stream of readers never starves a queued writer.
 *
 * A write lease can be downgraded to a read lease in place (its own entry changes mode, keeping its place
 * and fence): a writer queued behind it never gets in between. There is no upgrade: two readers that both
 * wait to become the writer each wait for the other to leave, for ever.
 *
 * Fences: a writer's is greater than every earlier grant, readers' included; a reader's is its read epoch,
 * greater than every writer granted before it and smaller than every writer granted after it. A resource
 * that keeps the highest writer's fence it accepted can refuse a reader's fence below it.
 */
import type { RwLockFacet, RwLockInfo, RwLockMode, RwLockRequest } from './backend.js'
import { LockNotAcquiredError } from './errors.js'
import { whileHeld } from './holding.js'
import type { Lock, LockHandle } from './lock.js'
import type { AcquireOptions } from './options.js'
import { trackOwnLease } from './own-leases.js'

/** A read lease of a read-write lock: shared with other readers, never with a writer. */
export interface ReadLock extends Lock {
  /** Always `read`. */
  readonly mode: 'read'
}

/** A write lease of a read-write lock: nobody else holds the lock while it does. */
export interface WriteLock extends Lock {
  /** Always `write`. */
  readonly mode: 'write'
  /**
   * Turns this write lease into a read lease at once, in its own place in line: no writer waiting behind it
   * gets in between, and readers behind it are admitted. The read lease keeps this lease's fence and
   * renewal; this handle holds nothing afterwards (its `release` does nothing). Calling it again resolves
   * with the same read lease.
   * @throws {LockLostError} when the lease is no longer ours
   * @throws {LockReleasedError} after `release()`
   * @throws {BackendUnavailableError} when the outcome is unknown: the lease is still ours, as a writer or a
   * reader; call `downgrade` again, or release it
   */
  downgrade(): Promise<ReadLock>
}

/** One lease of a read-write lock, as `inspect` shows it. */
export interface RwLockHolderView {
  /** The lease's owner id (`Lock.owner`). */
  readonly owner: string
  /** Shared (`read`) or exclusive (`write`). */
  readonly mode: RwLockMode
  /** Who holds it, in words, where the store keeps it. */
  readonly holder?: string | undefined
  /** Its fence, where the store keeps it. */
  readonly fence?: bigint | undefined
  /** Its remaining lease as the store sees it, in ms. */
  readonly expiresInMs?: number | undefined
  /** True when it is a lease of this client. */
  readonly isMe: boolean
}

/** A read-write lock as the store keeps it now. Diagnostic: only a grant admits. */
export interface RwLockView {
  /** The valid leases. */
  readonly holders: readonly RwLockHolderView[]
  /** How many acquires wait in line. */
  readonly waiting: number
  /** The latest fence granted, where the store keeps it. */
  readonly fence?: bigint | undefined
}

/** A read-write lock, by name: `locks.rwlock(name)`. */
export interface RwLock {
  /** The lock's name. */
  readonly name: string
  /**
   * Waits until no writer is ahead of this reader in line, then holds the lock shared.
   * @throws {LockNotAcquiredError} when `timeout` passes first
   * @throws {CapabilityError} when the backend offers no read-write lock
   */
  read(options?: AcquireOptions): Promise<ReadLock>
  /**
   * Waits until this writer is first in line (every earlier reader and writer gone), then holds the lock alone.
   * @throws {LockNotAcquiredError} when `timeout` passes first
   * @throws {CapabilityError} when the backend offers no read-write lock
   */
  write(options?: AcquireOptions): Promise<WriteLock>
  /** `read` with `timeout: 0` by default; resolves `null` instead of waiting. */
  tryRead(options?: AcquireOptions): Promise<ReadLock | null>
  /** `write` with `timeout: 0` by default; resolves `null` instead of waiting. */
  tryWrite(options?: AcquireOptions): Promise<WriteLock | null>
  /** Reads, runs `fn`, and releases; `fn` should stop when `lock.signal` aborts. */
  withRead<T>(fn: (lock: ReadLock) => T | Promise<T>, options?: AcquireOptions): Promise<T>
  /**
   * Writes, runs `fn`, and releases (the read lease too, when `fn` downgraded); `fn` should stop when
   * `lock.signal` aborts.
   */
  withWrite<T>(fn: (lock: WriteLock) => T | Promise<T>, options?: AcquireOptions): Promise<T>
  /** One read of the holders and the line. @throws {BackendUnavailableError} as `inspect` */
  inspect(options?: { readonly signal?: AbortSignal | undefined }): Promise<RwLockView>
}

/** What a read-write lock needs from its client (src/core/client.ts). */
export interface RwLockRuntime {
  /**
   * Runs one acquire: the acquire loop on the rwlock facet, with the mode asked for; without
   * `defaultTimeoutMs`, the client's default timeout.
   */
  acquire(
    name: string,
    options: AcquireOptions | undefined,
    request: RwLockRequest,
    defaultTimeoutMs?: number,
  ): Promise<{ readonly lock: LockHandle; readonly facet: RwLockFacet }>
  /** A read of the facet, bounded as the client bounds `inspect`. */
  read<T>(
    name: string,
    signal: AbortSignal | undefined,
    fn: (facet: RwLockFacet, signal: AbortSignal) => Promise<T>,
  ): Promise<T>
  /** The owner ids of this client's read-write leases while they hold (`isMe`): ids are unique, so one set serves every name. */
  readonly mine: Set<string>
}

/** The fields every lease of a read-write lock shows, over the core's handle. */
class RwHandle {
  protected readonly lock: LockHandle

  constructor(lock: LockHandle, mine: Set<string>) {
    this.lock = lock
    trackOwnLease(lock, mine)
  }

  get key(): string {
    return this.lock.key
  }
  get owner(): string {
    return this.lock.owner
  }
  get fence(): bigint {
    return this.lock.fence
  }
  get signal(): AbortSignal {
    return this.lock.signal
  }
  get validUntil(): number {
    return this.lock.validUntil
  }
  get remainingMs(): number {
    return this.lock.remainingMs
  }
  extend(ttl?: number | string): Promise<number> {
    return this.lock.extend(ttl)
  }
  /** Refused: only a lock's lease can be resumed in another process (docs/resume.md). */
  token(): string {
    return this.lock.token()
  }
}

class ReadHandle extends RwHandle implements ReadLock {
  readonly mode = 'read'
  readonly #mine: Set<string>

  constructor(lock: LockHandle, mine: Set<string>) {
    super(lock, mine)
    this.#mine = mine
  }

  release(): Promise<void> {
    const owner = this.lock.owner
    return this.lock.release().finally(() => this.#mine.delete(owner))
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release()
  }
}

class WriteHandle extends RwHandle implements WriteLock {
  readonly mode = 'write'
  readonly #facet: RwLockFacet
  readonly #mine: Set<string>
  /** The downgrade, once asked and not failed: the lease belongs to its read handle from then on. */
  #downgrading: Promise<ReadLock> | undefined
  #downgraded = false

  constructor(lock: LockHandle, facet: RwLockFacet, mine: Set<string>) {
    super(lock, mine)
    this.#facet = facet
    this.#mine = mine
  }

  downgrade(): Promise<ReadLock> {
    this.#downgrading ??= this.lock
      .update('downgrade', async (lease, signal) => {
        const result = await this.#facet.downgrade(lease, signal)
        return result.downgraded ? { done: true, cookie: result.cookie } : { done: false }
      })
      .then(
        () => {
          this.#downgraded = true
          return new ReadHandle(this.lock, this.#mine)
        },
        (error: unknown) => {
          // Not downgraded (or not known to be): a later call tries again.
          this.#downgrading = undefined
          throw error
        },
      )
    return this.#downgrading
  }

  /** Ends the lease whatever its mode now: `withWrite`'s end. */
  releaseLease(): Promise<void> {
    const owner = this.lock.owner
    return this.lock.release().finally(() => this.#mine.delete(owner))
  }

  release(): Promise<void> {
    // After a downgrade the lease is the read handle's to release.
    if (this.#downgraded) return Promise.resolve()
    return this.releaseLease()
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release()
  }
}

export class RwLockImpl implements RwLock {
  readonly name: string
  readonly #runtime: RwLockRuntime
  readonly #mine: Set<string>

  constructor(name: string, runtime: RwLockRuntime) {
    this.name = name
    this.#runtime = runtime
    this.#mine = runtime.mine
  }

  read(options?: AcquireOptions): Promise<ReadLock> {
    return this.#read(options, undefined)
  }

  write(options?: AcquireOptions): Promise<WriteLock> {
    return this.#write(options, undefined)
  }

  tryRead(options?: AcquireOptions): Promise<ReadLock | null> {
    return orNull(this.#read(options, 0))
  }

  tryWrite(options?: AcquireOptions): Promise<WriteLock | null> {
    return orNull(this.#write(options, 0))
  }

  async #read(options: AcquireOptions | undefined, defaultTimeoutMs?: number): Promise<ReadLock> {
    const { lock } = await this.#runtime.acquire(this.name, options, READ, defaultTimeoutMs)
    return new ReadHandle(lock, this.#mine)
  }

  async #write(options: AcquireOptions | undefined, defaultTimeoutMs?: number): Promise<WriteHandle> {
    const { lock, facet } = await this.#runtime.acquire(this.name, options, WRITE, defaultTimeoutMs)
    return new WriteHandle(lock, facet, this.#mine)
  }

  async withRead<T>(fn: (lock: ReadLock) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const held = await this.read(options)
    return whileHeld(held, () => held.release(), fn)
  }

  async withWrite<T>(fn: (lock: WriteLock) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const held = await this.#write(options, undefined)
    return whileHeld(held, () => held.releaseLease(), fn)
  }

  async inspect(options?: { readonly signal?: AbortSignal | undefined }): Promise<RwLockView> {
    const info = await this.#runtime.read(this.name, options?.signal, (facet, signal) =>
      facet.holders(this.name, signal),
    )
    return this.#view(info)
  }

  #view(info: RwLockInfo | null): RwLockView {
    return {
      holders: (info?.holders ?? []).map((h) => ({
        owner: h.owner,
        mode: h.mode,
        ...(h.holder === undefined ? {} : { holder: h.holder }),
        ...(h.fence === undefined ? {} : { fence: h.fence }),
        ...(h.expiresInMs === undefined ? {} : { expiresInMs: Math.max(0, Math.floor(h.expiresInMs)) }),
        isMe: this.#mine.has(h.owner),
      })),
      waiting: info?.waiting ?? 0,
      ...(info?.fence === undefined ? {} : { fence: info.fence }),
    }
  }
}

const READ: RwLockRequest = { mode: 'read' }
const WRITE: RwLockRequest = { mode: 'write' }

async function orNull<T>(acquiring: Promise<T>): Promise<T | null> {
  try {
    return await acquiring
  } catch (error) {
    if (error instanceof LockNotAcquiredError) return null
    throw error
  }
}
