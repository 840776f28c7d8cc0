/**
 * The Redis election: leadership is a lease on the election's leader key (layout.ts), taken, proclaimed,
 * extended and resigned by one script each (scripts.ts), with the leader's value stored beside it.
 *
 * Plain line, whatever the backend's `fair` option: a released leadership goes to whichever candidate asks
 * first. Fairness among candidates buys an election nothing (any live candidate may lead), and a queue
 * would bring back what a campaign given up must not leave behind (entries that could lead later) and the
 * fair hand-over's short first lease. Nor does it keep the mutex's starvation mark: a candidate that waits
 * longer than another is not starving, another leads.
 *
 * Waking: candidates wait on `released` (a resign wakes one per client, as a lock's release does);
 * observers on `changed`, which every grant, proclaim and resign publish to. A leader whose lease runs out
 * publishes nothing: observers read again at its lease end (the core's observer), candidates re-attempt
 * then (the refused attempt's PTTL).
 */
import { raceSignal } from '../../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  BackendCapabilities,
  BackendLimits,
  ElectionFacet,
  ExtendResult,
  Grant,
  HeldLease,
  LockInfo,
  ProclaimResult,
} from '../../../core/backend.js'
import { BackendUnavailableError, type LockError, quoteKey } from '../../../core/errors.js'
import { describedBy, grantOf, type ReplicaPolicy } from '../mutex/facet.js'
import { EXTEND } from '../mutex/scripts.js'
import { isReplyError, type RedisStore } from '../store.js'
import type { Subscriptions } from '../subscriptions.js'
import { type RedisElectionKeys, redisElectionKeys } from './layout.js'
import { CAMPAIGN, INSPECT, PROCLAIM, RESIGN } from './scripts.js'

/** What an election is built from: the backend's store, subscriptions, limits and replica policy. */
export interface RedisElectionParts {
  readonly store: RedisStore
  readonly subscriptions: Subscriptions
  readonly limits: BackendLimits
  readonly replicas: ReplicaPolicy
}

export class RedisElection implements ElectionFacet {
  readonly id: string
  // localHint: a wait only joins the subscriber connection's waiters, as the mutex's (../shell.ts).
  readonly capabilities: BackendCapabilities = {
    expiry: 'server-ttl',
    notify: true,
    fifo: false,
    localHint: true,
  }
  readonly limits: BackendLimits
  readonly #store: RedisStore
  readonly #subscriptions: Subscriptions
  readonly #replicas: ReplicaPolicy

  constructor(parts: RedisElectionParts) {
    this.id = parts.store.id
    this.limits = parts.limits
    this.#store = parts.store
    this.#subscriptions = parts.subscriptions
    this.#replicas = parts.replicas
  }

  /** The key and channel names of the election `name`, for operators and tests. */
  keysOf(name: string): RedisElectionKeys {
    return redisElectionKeys(name, this.#store.prefix)
  }

  #explain(name: string, what: string, error: unknown): LockError {
    const k = this.keysOf(name)
    return this.#store.explain(name, what, error, [k.leader, k.term, k.value])
  }

  async tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const k = this.keysOf(req.key)
    let result: AttemptResult
    try {
      const reply = await raceSignal(
        this.#store.run(
          CAMPAIGN,
          [k.leader, k.term, k.value, k.holder],
          [req.owner, req.ttlMs, req.value ?? '', req.holder ?? '', k.changed],
          signal,
        ),
        signal,
      )
      result = grantOf(reply, req.ttlMs)
    } catch (error) {
      // The core treats an abort or an error reply as unknown and calls `abandon` (owner-checked).
      if (signal.aborted || isReplyError(error)) throw this.#explain(req.key, 'campaign for election', error)
      result = await this.#readBack(req, error, signal)
    }
    if (result.granted && this.#replicas.min > 0) return this.#awaitReplicas(req, result)
    return result
  }

  /** No reply: the script may have run. Read before deciding; the lease is what the store keeps now. */
  async #readBack(req: AcquireRequest, error: unknown, signal: AbortSignal): Promise<Grant> {
    const k = this.keysOf(req.key)
    const read = (await raceSignal(
      this.#store.run(INSPECT, [k.leader, k.term, k.value, k.holder], []),
      signal,
    ).catch(() => undefined)) as [string | null, number, string | null] | undefined
    // Leading without a term key (evicted, deleted): no grant; the retry mints a fresh term (CAMPAIGN).
    if (!read || read[0] !== req.owner || read[1] <= 0 || read[2] === null) {
      throw this.#explain(req.key, 'campaign for election', error)
    }
    return { granted: true, fence: BigInt(read[2]), ttlMs: read[1] }
  }

  /** As the mutex: too few replicas acknowledged the grant (`minReplicas`), so resign and fail. */
  async #awaitReplicas(req: AcquireRequest, grant: AttemptResult): Promise<AttemptResult> {
    const { min, timeoutMs } = this.#replicas
    const acks = await this.#store.replicasAcknowledging(min, timeoutMs)
    if (acks >= min) return grant
    await this.#resign(req)
    throw new BackendUnavailableError(
      `Only ${acks} of the ${min} replicas required by \`minReplicas\` acknowledged the leadership of election ` +
        `${quoteKey(req.key)} on ${this.#store.id} within ${timeoutMs} ms, so it resigned. Check the ` +
        'replicas (INFO replication)',
      { key: req.key, backend: this.#store.id },
    )
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    const k = this.keysOf(lease.key)
    try {
      // The mutex's EXTEND: the leader key, then the value (always moved with it), then term and holder
      // (kept at least as long as the lease).
      const reply = await raceSignal(
        this.#store.run(EXTEND, [k.leader, k.value, k.term, k.holder], [lease.owner, ttlMs]),
        signal,
      )
      return { renewed: reply === 1 }
    } catch (error) {
      throw this.#explain(lease.key, 'extend the leadership of election', error)
    }
  }

  async proclaim(lease: HeldLease, value: string, signal: AbortSignal): Promise<ProclaimResult> {
    const k = this.keysOf(lease.key)
    try {
      const reply = await raceSignal(
        this.#store.run(
          PROCLAIM,
          [k.leader, k.term, k.value],
          [lease.owner, lease.fence.toString(), value, k.changed],
        ),
        signal,
      )
      return { proclaimed: reply === 1 }
    } catch (error) {
      throw this.#explain(lease.key, 'proclaim a value in election', error)
    }
  }

  #resign(lease: { key: string; owner: string }): Promise<unknown> {
    const k = this.keysOf(lease.key)
    return this.#store.run(RESIGN, [k.leader, k.value, k.holder], [lease.owner, k.released, k.changed])
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    try {
      return (await raceSignal(this.#resign(lease), signal)) === 1
    } catch (error) {
      throw this.#explain(lease.key, 'resign from election', error)
    }
  }

  /** A campaign given up: resign whatever an attempt of it may have won. There is no queue to leave. */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    // Sent on the connection that carried the attempts, so it lands after all of them.
    await raceSignal(this.#resign(req), signal)
  }

  async inspect(name: string, signal: AbortSignal): Promise<LockInfo | null> {
    const k = this.keysOf(name)
    try {
      const [owner, pttl, term, value, described] = (await raceSignal(
        this.#store.run(INSPECT, [k.leader, k.term, k.value, k.holder], []),
        signal,
      )) as [string | null, number, string | null, string | null, string | null]
      if (owner === null) return term === null ? null : { held: false, fence: BigInt(term) }
      return {
        held: true,
        owner,
        ...describedBy(owner, described),
        ...(term === null ? {} : { fence: BigInt(term) }),
        ...(pttl >= 0 ? { expiresInMs: pttl } : {}),
        ...(value?.startsWith(`${owner} `) ? { value: value.slice(owner.length + 1) } : {}),
      }
    } catch (error) {
      throw this.#explain(name, 'inspect election', error)
    }
  }

  async waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<undefined> {
    await this.#subscriptions.wait(this.keysOf(req.key).released, undefined, signal, req.owner)
    return undefined
  }

  watch(name: string, signal: AbortSignal): Promise<void> {
    return this.#subscriptions.watch(this.keysOf(name).changed, signal)
  }
}
