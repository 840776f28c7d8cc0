/**
 * The Redis read-write lock: one line of readers and writers per name, kept in the keys of layout.ts and
 * changed by one script per operation (scripts.ts), each one atomic step judged by the server's clock. A
 * reader is granted when no writer is ahead of it in line, a writer when it is first; a waiter's place
 * lapses when it stops asking for max(ttl, 3 s). Whatever the backend's `fair` option: the line is the
 * lock's own.
 *
 * Waking: every change of the line (a release, an abandon, a downgrade, a lease or place found ended)
 * publishes the owner id of each waiter that may now be granted on the lock's one `changed` channel: the
 * first in line when it is a writer, else every reader ahead of the first writer, never the whole line. A
 * lease that runs out publishes nothing until a script finds it ended: a queued attempt returns the ms until
 * the soonest other lease or place ends, and the core asks again then.
 */
import { raceSignal } from '../../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  BackendCapabilities,
  BackendLimits,
  DowngradeResult,
  ExtendResult,
  Grant,
  HeldLease,
  LockInfo,
  RwLockFacet,
  RwLockHolder,
  RwLockInfo,
} from '../../../core/backend.js'
import { BackendUnavailableError, type LockError, quoteKey } from '../../../core/errors.js'
import type { ReplicaPolicy } from '../mutex/facet.js'
import { isReplyError, type RedisStore } from '../store.js'
import type { Subscriptions } from '../subscriptions.js'
import { type RedisRwLockKeys, redisRwLockKeys, scriptKeys } from './layout.js'
import { ABANDON, ACQUIRE, DOWNGRADE, EXTEND, HOLDERS, INSPECT, READ_BACK, RELEASE } from './scripts.js'

/**
 * How long a waiter keeps its place without asking again, at least: a queued waiter asks about once a
 * second (the core's slow fallback), and one that stopped without abandoning must not block the line for
 * longer than a lease.
 */
const PLACE_KEPT_MIN_MS = 3000

/** What a read-write lock is built from: the backend's store, subscriptions, limits and replica policy. */
export interface RedisRwLockParts {
  readonly store: RedisStore
  readonly subscriptions: Subscriptions
  readonly limits: BackendLimits
  readonly replicas: ReplicaPolicy
}

export class RedisRwLock implements RwLockFacet {
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

  constructor(parts: RedisRwLockParts) {
    this.id = parts.store.id
    this.limits = parts.limits
    this.#store = parts.store
    this.#subscriptions = parts.subscriptions
    this.#replicas = parts.replicas
  }

  /** The key and channel names of the read-write lock `name`, for operators and tests. */
  keysOf(name: string): RedisRwLockKeys {
    return redisRwLockKeys(name, this.#store.prefix)
  }

  #explain(name: string, what: string, error: unknown): LockError {
    return this.#store.explain(name, what, error, scriptKeys(this.keysOf(name)))
  }

  /** Runs a writing script of the lock `name`: its keys, the channel, then `args`. */
  #run(
    name: string,
    s: Parameters<RedisStore['run']>[0],
    args: Array<string | number>,
    signal?: AbortSignal,
  ) {
    const k = this.keysOf(name)
    return this.#store.run(s, scriptKeys(k), [k.changed, ...args], signal)
  }

  async tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const mode = req.rwlock?.mode
    if (!mode) throw new TypeError('A read-write lock acquire carries `rwlock` (its mode)')
    let result: AttemptResult
    try {
      const args = [req.owner, req.ttlMs, mode, req.holder ?? '', Math.max(req.ttlMs, PLACE_KEPT_MIN_MS)]
      const [granted, value] = (await raceSignal(this.#run(req.key, ACQUIRE, args, signal), signal)) as [
        number,
        number | string,
      ]
      result =
        granted === 1
          ? { granted: true, fence: BigInt(value), ttlMs: req.ttlMs }
          : { granted: false, queued: true, ...(Number(value) > 0 ? { retryInMs: Number(value) } : {}) }
    } catch (error) {
      // An abort or an error reply: the core treats the outcome as unknown and calls `abandon`.
      if (signal.aborted || isReplyError(error))
        throw this.#explain(req.key, `acquire (to ${mode}) the read-write`, error)
      result = await this.#readBack(req, mode, error, signal)
    }
    if (result.granted && this.#replicas.min > 0) return this.#awaitReplicas(req, result)
    return result
  }

  /** No reply: the script may have run. Read before deciding; the lease is what the store keeps now. */
  async #readBack(req: AcquireRequest, mode: string, error: unknown, signal: AbortSignal): Promise<Grant> {
    const read = (await raceSignal(
      this.#store.run(READ_BACK, scriptKeys(this.keysOf(req.key)), [req.owner]),
      signal,
    ).catch(() => undefined)) as [string | null, number] | undefined
    if (!read || read[0] === null || read[1] <= 0)
      throw this.#explain(req.key, `acquire (to ${mode}) the read-write`, error)
    return { granted: true, fence: BigInt(read[0]), ttlMs: read[1] }
  }

  /** As the mutex: too few replicas acknowledged the grant (`minReplicas`), so give it back and fail. */
  async #awaitReplicas(req: AcquireRequest, grant: AttemptResult): Promise<AttemptResult> {
    const { min, timeoutMs } = this.#replicas
    const acks = await this.#store.replicasAcknowledging(min, timeoutMs)
    if (acks >= min) return grant
    await this.#run(req.key, ABANDON, [req.owner])
    throw new BackendUnavailableError(
      `Only ${acks} of the ${min} replicas required by \`minReplicas\` acknowledged the grant of read-write ` +
        `lock ${quoteKey(req.key)} on ${this.#store.id} within ${timeoutMs} ms, so it was given back. Check ` +
        'the replicas (INFO replication)',
      { key: req.key, backend: this.#store.id },
    )
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    try {
      const reply = await raceSignal(
        this.#run(lease.key, EXTEND, [lease.owner, lease.fence.toString(), ttlMs]),
        signal,
      )
      return { renewed: reply === 1 }
    } catch (error) {
      throw this.#explain(lease.key, 'extend the read-write', error)
    }
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    try {
      const reply = await raceSignal(
        this.#run(lease.key, RELEASE, [lease.owner, lease.fence.toString()]),
        signal,
      )
      return reply === 1
    } catch (error) {
      throw this.#explain(lease.key, 'release the read-write', error)
    }
  }

  /** An acquire given up: its lease or its place in line, whatever its attempts left. */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    // Sent on the connection that carried the attempts, so it lands after all of them.
    await raceSignal(this.#run(req.key, ABANDON, [req.owner]), signal)
  }

  async downgrade(lease: HeldLease, signal: AbortSignal): Promise<DowngradeResult> {
    try {
      const reply = await raceSignal(
        this.#run(lease.key, DOWNGRADE, [lease.owner, lease.fence.toString()]),
        signal,
      )
      return { downgraded: reply === 1 }
    } catch (error) {
      throw this.#explain(lease.key, 'downgrade the read-write', error)
    }
  }

  async inspect(name: string, signal: AbortSignal): Promise<LockInfo | null> {
    try {
      const [fence, valid] = (await raceSignal(
        this.#store.run(INSPECT, scriptKeys(this.keysOf(name)), []),
        signal,
      )) as [string | null, number]
      if (fence === null) return valid > 0 ? { held: true } : null
      return { held: valid > 0, fence: BigInt(fence) }
    } catch (error) {
      throw this.#explain(name, 'inspect the read-write', error)
    }
  }

  async holders(name: string, signal: AbortSignal): Promise<RwLockInfo | null> {
    let reply: Array<string | number> | null
    try {
      reply = (await raceSignal(
        this.#store.run(HOLDERS, scriptKeys(this.keysOf(name)), []),
        signal,
      )) as Array<string | number> | null
    } catch (error) {
      throw this.#explain(name, 'read the holders of the read-write', error)
    }
    if (reply === null) return null
    const holders: RwLockHolder[] = []
    for (let i = 2; i + 3 < reply.length; i += 4) {
      const grant = /^(\d+) ?([\s\S]*)$/.exec(String(reply[i + 3]))
      if (!grant) continue
      holders.push({
        owner: String(reply[i]),
        mode: reply[i + 1] === 1 ? 'write' : 'read',
        ...(grant[2] ? { holder: grant[2] } : {}),
        fence: BigInt(grant[1]!),
        expiresInMs: Number(reply[i + 2]),
      })
    }
    const fence = String(reply[0])
    return { holders, waiting: Number(reply[1]), ...(fence === '' ? {} : { fence: BigInt(fence) }) }
  }

  /** Wakes when this acquire is named on the lock's channel (it may now be granted), or on abort. */
  async waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<undefined> {
    await this.#subscriptions.wait(this.keysOf(req.key).changed, req.owner, signal)
    return undefined
  }
}
