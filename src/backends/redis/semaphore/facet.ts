/**
 * The Redis semaphore: a limit, the leases holding permits and a line of waiters, kept in the keys of
 * layout.ts and changed by one script per operation (scripts.ts), each one atomic step judged by the
 * server's clock. A request is granted when it is first in line (or the line is empty) and its permits fit;
 * a waiter's place lapses when it stops asking for max(ttl, 3 s). Whatever the backend's `fair` option: the
 * line is the semaphore's own.
 *
 * Waking: every change that may admit the first in line (a release, an abandon, `setLimit`, a grant with
 * others behind it) publishes that waiter's owner id on the semaphore's one `changed` channel, so only it
 * re-asks, not every waiter. A lease that runs out publishes nothing: a queued attempt returns the ms until
 * the soonest lease ends, and the core asks again then.
 */
import { raceSignal } from '../../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  BackendCapabilities,
  BackendLimits,
  ExtendResult,
  Grant,
  HeldLease,
  LockInfo,
  PermitHolder,
  SemaphoreFacet,
  SemaphoreInfo,
} from '../../../core/backend.js'
import {
  BackendUnavailableError,
  LimitMismatchError,
  type LockError,
  quoteKey,
} from '../../../core/errors.js'
import type { ReplicaPolicy } from '../mutex/facet.js'
import { isReplyError, type RedisStore } from '../store.js'
import type { Subscriptions } from '../subscriptions.js'
import { type RedisSemaphoreKeys, redisSemaphoreKeys, scriptKeys } from './layout.js'
import { ABANDON, ACQUIRE, EXTEND, HOLDERS, INSPECT, READ_BACK, RELEASE, SET_LIMIT } from './scripts.js'

/**
 * How long a waiter keeps its place without asking again, at least: a queued waiter asks about once a
 * second (the core's slow fallback), and one that stopped without abandoning must not block the line for
 * longer than a lease.
 */
const PLACE_KEPT_MIN_MS = 3000

/** What a semaphore is built from: the backend's store, subscriptions, limits and replica policy. */
export interface RedisSemaphoreParts {
  readonly store: RedisStore
  readonly subscriptions: Subscriptions
  readonly limits: BackendLimits
  readonly replicas: ReplicaPolicy
}

export class RedisSemaphore implements SemaphoreFacet {
  readonly id: string
  // localHint: a wait only joins the subscriber connection's waiters, as the mutex's (../shell.ts).
  readonly capabilities: BackendCapabilities = {
    expiry: 'server-ttl',
    notify: true,
    fifo: true,
    localHint: true,
  }
  readonly limits: BackendLimits
  readonly #store: RedisStore
  readonly #subscriptions: Subscriptions
  readonly #replicas: ReplicaPolicy

  constructor(parts: RedisSemaphoreParts) {
    this.id = parts.store.id
    this.limits = parts.limits
    this.#store = parts.store
    this.#subscriptions = parts.subscriptions
    this.#replicas = parts.replicas
  }

  /** The key and channel names of the semaphore `name`, for operators and tests. */
  keysOf(name: string): RedisSemaphoreKeys {
    return redisSemaphoreKeys(name, this.#store.prefix)
  }

  #explain(name: string, what: string, error: unknown): LockError {
    return this.#store.explain(name, what, error, scriptKeys(this.keysOf(name)))
  }

  async tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const asked = req.semaphore
    if (!asked) throw new TypeError('A semaphore acquire carries `semaphore` (its limit and permits)')
    const k = this.keysOf(req.key)
    let result: AttemptResult
    try {
      const [kind, value] = (await raceSignal(
        this.#store.run(
          ACQUIRE,
          scriptKeys(k),
          [
            req.owner,
            req.ttlMs,
            asked.limit,
            asked.permits,
            asked.limitCompared ? '1' : '0',
            req.holder ?? '',
            k.changed,
            Math.max(req.ttlMs, PLACE_KEPT_MIN_MS),
          ],
          signal,
        ),
        signal,
      )) as [number, number | string]
      if (kind === -1) {
        throw new LimitMismatchError(Number(value), asked.limit, { key: req.key, backend: this.id })
      }
      result =
        kind === 1
          ? { granted: true, fence: BigInt(value), ttlMs: req.ttlMs }
          : { granted: false, queued: true, ...(Number(value) > 0 ? { retryInMs: Number(value) } : {}) }
    } catch (error) {
      // An abort or an error reply: the core treats the outcome as unknown and calls `abandon`.
      if (signal.aborted || isReplyError(error) || error instanceof LimitMismatchError) {
        throw this.#explain(req.key, 'acquire permits of semaphore', error)
      }
      result = await this.#readBack(req, error, signal)
    }
    if (result.granted && this.#replicas.min > 0) return this.#awaitReplicas(req, result)
    return result
  }

  /** No reply: the script may have run. Read before deciding; the lease is what the store keeps now. */
  async #readBack(req: AcquireRequest, error: unknown, signal: AbortSignal): Promise<Grant> {
    const read = (await raceSignal(
      this.#store.run(READ_BACK, scriptKeys(this.keysOf(req.key)), [req.owner]),
      signal,
    ).catch(() => undefined)) as [string | null, number] | undefined
    if (!read || read[0] === null || read[1] <= 0) {
      throw this.#explain(req.key, 'acquire permits of semaphore', error)
    }
    return { granted: true, fence: BigInt(read[0]), ttlMs: read[1] }
  }

  /** As the mutex: too few replicas acknowledged the grant (`minReplicas`), so give it back and fail. */
  async #awaitReplicas(req: AcquireRequest, grant: AttemptResult): Promise<AttemptResult> {
    const { min, timeoutMs } = this.#replicas
    const acks = await this.#store.replicasAcknowledging(min, timeoutMs)
    if (acks >= min) return grant
    await this.#abandon(req)
    throw new BackendUnavailableError(
      `Only ${acks} of the ${min} replicas required by \`minReplicas\` acknowledged the permits of semaphore ` +
        `${quoteKey(req.key)} on ${this.#store.id} within ${timeoutMs} ms, so they were given back. Check the ` +
        'replicas (INFO replication)',
      { key: req.key, backend: this.#store.id },
    )
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    try {
      const reply = await raceSignal(
        this.#store.run(EXTEND, scriptKeys(this.keysOf(lease.key)), [
          lease.owner,
          lease.fence.toString(),
          ttlMs,
        ]),
        signal,
      )
      return { renewed: reply === 1 }
    } catch (error) {
      throw this.#explain(lease.key, 'extend the permits of semaphore', error)
    }
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    const k = this.keysOf(lease.key)
    try {
      const reply = await raceSignal(
        this.#store.run(RELEASE, scriptKeys(k), [lease.owner, lease.fence.toString(), k.changed]),
        signal,
      )
      return reply === 1
    } catch (error) {
      throw this.#explain(lease.key, 'release the permits of semaphore', error)
    }
  }

  #abandon(req: AcquireRequest): Promise<unknown> {
    const k = this.keysOf(req.key)
    return this.#store.run(ABANDON, scriptKeys(k), [req.owner, k.changed])
  }

  /** An acquire given up: its lease and its place in line, whatever its attempts left. */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    // Sent on the connection that carried the attempts, so it lands after all of them.
    await raceSignal(this.#abandon(req), signal)
  }

  async inspect(name: string, signal: AbortSignal): Promise<LockInfo | null> {
    try {
      const [sequence, valid] = (await raceSignal(
        this.#store.run(INSPECT, scriptKeys(this.keysOf(name)), []),
        signal,
      )) as [string | null, number]
      if (sequence === null) return valid > 0 ? { held: true } : null
      return { held: valid > 0, fence: BigInt(sequence) }
    } catch (error) {
      throw this.#explain(name, 'inspect semaphore', error)
    }
  }

  async holders(name: string, signal: AbortSignal): Promise<SemaphoreInfo | null> {
    let reply: Array<string | number> | null
    try {
      reply = (await raceSignal(
        this.#store.run(HOLDERS, scriptKeys(this.keysOf(name)), []),
        signal,
      )) as Array<string | number> | null
    } catch (error) {
      throw this.#explain(name, 'read the holders of semaphore', error)
    }
    if (reply === null) return null
    const holders: PermitHolder[] = []
    let held = 0
    for (let i = 2; i + 2 < reply.length; i += 3) {
      const grant = /^(\d+) (\d+) ?([\s\S]*)$/.exec(String(reply[i + 2]))
      if (!grant) continue
      const permits = Number(grant[1])
      held += permits
      holders.push({
        owner: String(reply[i]),
        ...(grant[3] ? { holder: grant[3] } : {}),
        permits,
        sequence: BigInt(grant[2]!),
        expiresInMs: Number(reply[i + 1]),
      })
    }
    return { limit: Number(reply[0]), held, holders, waiting: Number(reply[1]) }
  }

  async setLimit(name: string, limit: number, signal: AbortSignal): Promise<void> {
    const k = this.keysOf(name)
    try {
      await raceSignal(this.#store.run(SET_LIMIT, scriptKeys(k), [limit, k.changed]), signal)
    } catch (error) {
      throw this.#explain(name, 'set the limit of semaphore', error)
    }
  }

  /** Wakes when this acquire is named first in line on the semaphore's channel (or on abort). */
  async waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<undefined> {
    await this.#subscriptions.wait(this.keysOf(req.key).changed, req.owner, signal)
    return undefined
  }
}
