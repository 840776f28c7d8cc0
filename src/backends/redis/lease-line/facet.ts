/**
 * What the Redis primitives with a line of their own share (the semaphore, the read-write lock): leases and
 * waiters' places kept in a few keys per name, changed by scripts judged by the server's clock, and a
 * `changed` channel naming the waiters that may now be granted. This base holds the parts every such
 * primitive is built from, runs a script on one name's keys, reads back a grant whose reply was lost, gives
 * a grant back when too few replicas acknowledged it, and waits on the channel; a subclass adds its own
 * scripts and what their replies mean. The Lua they share is ./scripts.ts.
 *
 * The store, `explain` and `run` are `protected` rather than `#private`: the subclasses' operations use them.
 */
import { raceSignal } from '../../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  BackendCapabilities,
  BackendLimits,
  Grant,
  LockInfo,
} from '../../../core/backend.js'
import { BackendUnavailableError, type LockError, quoteKey } from '../../../core/errors.js'
import type { Script } from '../lua.js'
import type { ReplicaPolicy } from '../mutex/facet.js'
import type { RedisStore } from '../store.js'
import type { Subscriptions } from '../subscriptions.js'

/** What a primitive with a line is built from: the backend's store, subscriptions, limits and replica policy. */
export interface RedisLeaseLineParts {
  readonly store: RedisStore
  readonly subscriptions: Subscriptions
  readonly limits: BackendLimits
  readonly replicas: ReplicaPolicy
}

/** How one primitive lays out its keys, and its two read-only scripts that the base runs. */
export interface RedisLeaseLineLayout<Keys extends { readonly changed: string }> {
  /** The primitive in messages, before "lock 'name'": `semaphore`, `the read-write`. */
  readonly noun: string
  /** The key and channel names of `name` under `prefix` (its layout.ts). */
  readonly keysOf: (name: string, prefix: string) => Keys
  /** The keys in the KEYS order of every script of the primitive. */
  readonly scriptKeys: (keys: Keys) => string[]
  /** ARGV: owner. Returns {fence or sequence, ms left} of its valid lease, or {false, 0}. */
  readonly readBack: Script
  /** No ARGV. Returns {the last fence or sequence, or false; the number of valid leases}. */
  readonly inspect: Script
}

export abstract class RedisLeaseLine<Keys extends { readonly changed: string }> {
  readonly id: string
  // localHint: a wait only joins the subscriber connection's waiters, as the mutex's (../shell.ts).
  readonly capabilities: BackendCapabilities = {
    expiry: 'server-ttl',
    notify: true,
    fifo: true,
    localHint: true,
  }
  readonly limits: BackendLimits
  protected readonly store: RedisStore
  readonly #subscriptions: Subscriptions
  readonly #replicas: ReplicaPolicy
  readonly #layout: RedisLeaseLineLayout<Keys>

  constructor(parts: RedisLeaseLineParts, layout: RedisLeaseLineLayout<Keys>) {
    this.id = parts.store.id
    this.limits = parts.limits
    this.store = parts.store
    this.#subscriptions = parts.subscriptions
    this.#replicas = parts.replicas
    this.#layout = layout
  }

  /** The key and channel names of `name`, for operators and tests. */
  keysOf(name: string): Keys {
    return this.#layout.keysOf(name, this.store.prefix)
  }

  protected explain(name: string, what: string, error: unknown): LockError {
    return this.store.explain(name, what, error, this.#layout.scriptKeys(this.keysOf(name)))
  }

  /** Runs `s` on the keys of `name` with `args`. */
  protected run(
    name: string,
    s: Script,
    args: Array<string | number>,
    signal?: AbortSignal,
  ): Promise<unknown> {
    return this.store.run(s, this.#layout.scriptKeys(this.keysOf(name)), args, signal)
  }

  /** Removes whatever `req`'s owner holds or where it waits (the primitive's ABANDON script). */
  protected abstract giveUp(req: AcquireRequest): Promise<unknown>

  /**
   * No reply to an attempt: its script may have run. Reads before deciding; the lease is what the store keeps
   * now. Throws `what` explained when it holds nothing.
   */
  protected async readBack(
    req: AcquireRequest,
    what: string,
    error: unknown,
    signal: AbortSignal,
  ): Promise<Grant> {
    const read = (await raceSignal(this.run(req.key, this.#layout.readBack, [req.owner]), signal).catch(
      () => undefined,
    )) as [string | null, number] | undefined
    if (!read || read[0] === null || read[1] <= 0) throw this.explain(req.key, what, error)
    return { granted: true, fence: BigInt(read[0]), ttlMs: read[1] }
  }

  /**
   * As the mutex: a grant stands once `minReplicas` replicas acknowledged it; with fewer, it is given back
   * and the attempt fails.
   */
  protected async replicated(req: AcquireRequest, result: AttemptResult): Promise<AttemptResult> {
    if (!result.granted || this.#replicas.min === 0) return result
    const { min, timeoutMs } = this.#replicas
    const acks = await this.store.replicasAcknowledging(min, timeoutMs)
    if (acks >= min) return result
    await this.giveUp(req)
    throw new BackendUnavailableError(
      `Only ${acks} of the ${min} replicas required by \`minReplicas\` acknowledged the grant of ` +
        `${this.#layout.noun} lock ${quoteKey(req.key)} on ${this.store.id} within ${timeoutMs} ms, so it was ` +
        'given back. Check the replicas (INFO replication)',
      { key: req.key, backend: this.store.id },
    )
  }

  /** An acquire given up: its lease and its place in line, whatever its attempts left. */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    // Sent on the connection that carried the attempts, so it lands after all of them.
    await raceSignal(this.giveUp(req), signal)
  }

  async inspect(name: string, signal: AbortSignal): Promise<LockInfo | null> {
    try {
      const [fence, valid] = (await raceSignal(this.run(name, this.#layout.inspect, []), signal)) as [
        string | null,
        number,
      ]
      if (fence === null) return valid > 0 ? { held: true } : null
      return { held: valid > 0, fence: BigInt(fence) }
    } catch (error) {
      throw this.explain(name, `inspect ${this.#layout.noun}`, error)
    }
  }

  /** Wakes when this acquire is named on the channel (it may now be granted), or on abort. */
  async waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<undefined> {
    await this.#subscriptions.wait(this.keysOf(req.key).changed, req.owner, signal)
    return undefined
  }
}
