/**
 * The Redis mutex: one attempt (and the read-back after a lost reply), extend, release, abandon, inspect,
 * list, break and waiting, the same in every mode. What differs between plain and fair mode (which
 * scripts acquire, release and abandon run, which messages wake a waiter) is a `Mode` (mode.ts; plain.ts,
 * fair.ts); Redlock's nodes bring a mode of their own, with its own request type (`Mode<R>`). Over 300
 * lines: every method of the contract, which the core calls one after another, reads in this one file.
 *
 * This folder holds everything of the mutex and nothing another primitive needs: its Lua (scripts.ts),
 * its key names (layout.ts), its modes (mode.ts) and its listing (listing.ts). What every primitive
 * shares sits beside the folder: the connection (../connect.ts), scripts run by SHA and errors
 * (../store.ts, ../lua.ts), pub/sub (../subscriptions.ts), the hash tag and Cluster slots (../keys.ts),
 * SCAN (../scan.ts) and the backend shell (../shell.ts).
 *
 * Adding a primitive (an election, a semaphore): a folder beside this one, built the same way (its
 * scripts with `script()` from ../lua.ts, its key names from `taggedName` in ../keys.ts, a class over the
 * backend's `RedisStore` and `Subscriptions`), and one field in ../shell.ts that builds it. It may import
 * an algorithm it shares with the mutex from here (../election/ mints terms with MINT and extends with
 * EXTEND); no shared file but the shell and ../index.ts imports from here (a test holds them to it).
 */
import { raceSignal } from '../../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  BreakOptions,
  BreakResult,
  ExtendOutcome,
  ExtendResult,
  Grant,
  HeldLease,
  ListedLock,
  LockInfo,
} from '../../../core/backend.js'
import { BackendUnavailableError, type LockError, quoteKey } from '../../../core/errors.js'
import { slotOf } from '../keys.js'
import { scanPages } from '../scan.js'
import { isCluster, isReplyError, type RedisStore } from '../store.js'
import type { Subscriptions } from '../subscriptions.js'
import { type LockLayout, named } from './layout.js'
import { keysOf, lockKeyMatch } from './listing.js'
import type { Mode } from './mode.js'
import { EXTEND, EXTEND_MANY, INSPECT, RAISE_FENCE } from './scripts.js'

/**
 * The most locks one EXTEND_MANY carries: a script blocks the server while it runs (4 commands a lock, a
 * few hundred microseconds for this many), and a larger batch goes out as several.
 */
const EXTEND_BATCH = 250

const RENEWED: ExtendResult = { renewed: true }
const NOT_RENEWED: ExtendResult = { renewed: false }

/** After acquiring, how many replicas must acknowledge the write (`WAIT`), within how long. */
export interface ReplicaPolicy {
  readonly min: number
  readonly timeoutMs: number
}

/** What a mutex is built from: the backend's store and subscriptions, its key names, its mode. */
export interface RedisMutexParts<R extends AcquireRequest> {
  readonly store: RedisStore
  readonly subscriptions: Subscriptions
  readonly layout: LockLayout
  readonly mode: Mode<R>
  readonly replicas: ReplicaPolicy
}

/**
 * The mutex primitives of one Redis backend. The backend shell (../shell.ts) extends it, since the
 * core's contract has them at the backend's top level. Its methods live on the prototype: wrap it
 * (`{ ...backend }` copies none of them) by delegating to it, not by spreading it.
 */
export class RedisMutex<R extends AcquireRequest = AcquireRequest> {
  readonly #store: RedisStore
  readonly #subscriptions: Subscriptions
  readonly #layout: LockLayout
  readonly #mode: Mode<R>
  readonly #replicas: ReplicaPolicy

  constructor(parts: RedisMutexParts<R>) {
    this.#store = parts.store
    this.#subscriptions = parts.subscriptions
    this.#layout = parts.layout
    this.#mode = parts.mode
    this.#replicas = parts.replicas
  }

  /** The lock and fence key names of `key`, for operators. */
  keysOf(key: string): { lock: string; fence: string } {
    const k = this.#layout.keysOf(key)
    return { lock: k.lock, fence: k.fence }
  }

  /** The error to throw for a failed `what` of `key` (a conflict names the lock and fence keys). */
  #explain(key: string, what: string, error: unknown): LockError {
    const k = this.#layout.keysOf(key)
    return this.#store.explain(key, what, error, [k.lock, k.fence])
  }

  async tryAcquire(req: R, signal: AbortSignal): Promise<AttemptResult> {
    let result: AttemptResult
    try {
      const reply = await raceSignal(this.#mode.acquire(req, signal), signal)
      result = this.#mode.answer ? this.#mode.answer(reply, req.ttlMs) : grantOf(reply, req.ttlMs)
    } catch (error) {
      // An abort (the core's deadline, the caller) or an error reply: the core treats the outcome as
      // unknown and calls `abandon`, which removes any hold of this owner once this attempt has settled.
      if (signal.aborted || isReplyError(error)) throw this.#explain(req.key, 'acquire', error)
      result = await this.#readBack(req, error, signal)
    }
    if (result.granted && this.#replicas.min > 0) return this.#awaitReplicas(req, result)
    return result
  }

  /**
   * No reply (timeout, reset): the script may have run. Read before deciding, never leave a lock we took.
   * One script reads holder, remaining lease and fence together: the lease is what the store keeps
   * now (a fair hand-over sets a short one; an earlier attempt's PX has partly run), never the ttl
   * asked for. The core counts it from this attempt's start, which is before this read.
   */
  async #readBack(req: AcquireRequest, error: unknown, signal: AbortSignal): Promise<Grant> {
    const k = this.#layout.keysOf(req.key)
    const read = (await raceSignal(this.#store.run(INSPECT, [k.lock, k.fence], []), signal).catch(
      () => undefined,
    )) as [string | null, number, string | null] | undefined
    // Ours without a fence key (evicted, deleted): no fence to report, so no grant; the next attempt
    // finds the lock ours and mints a fresh one (ACQUIRE), never a 0 below the earlier holders' fences.
    if (!read || read[0] !== req.owner || read[1] <= 0 || read[2] === null)
      throw this.#explain(req.key, 'acquire', error)
    return { granted: true, fence: BigInt(read[2]), ttlMs: read[1] }
  }

  /** WAIT on the connection that wrote the lock; too few acknowledgements: release it and fail. */
  async #awaitReplicas(req: AcquireRequest, grant: AttemptResult): Promise<AttemptResult> {
    const { min, timeoutMs } = this.#replicas
    const acks = await this.#store.replicasAcknowledging(min, timeoutMs)
    if (acks >= min) return grant
    await this.#mode.release(req)
    throw new BackendUnavailableError(
      `Only ${acks} of the ${min} replicas required by \`minReplicas\` acknowledged lock ${quoteKey(req.key)} on ` +
        `${this.#store.id} within ${timeoutMs} ms, so it was released. Check the replicas (INFO replication)`,
      { key: req.key, backend: this.#store.id },
    )
  }

  async raiseFence(key: string, atLeast: bigint, signal: AbortSignal): Promise<bigint> {
    const k = this.#layout.keysOf(key)
    try {
      return BigInt(
        (await raceSignal(this.#store.run(RAISE_FENCE, [k.fence], [String(atLeast)]), signal)) as number,
      )
    } catch (error) {
      throw this.#explain(key, 'record the fence of', error)
    }
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    const k = this.#layout.keysOf(lease.key)
    try {
      const reply = await raceSignal(
        this.#store.run(EXTEND, [k.lock, k.holder, k.fence, ...named(k)], [lease.owner, ttlMs]),
        signal,
      )
      return reply === 1 ? { renewed: true } : { renewed: false }
    } catch (error) {
      throw this.#explain(lease.key, 'extend', error)
    }
  }

  /**
   * One EXTEND_MANY per EXTEND_BATCH locks, all sent at once; on a Cluster one per slot (a script's keys
   * share a slot). A batch without a reply leaves each of its locks' outcomes unknown.
   */
  async extendMany(
    leases: readonly HeldLease[],
    ttlMs: readonly number[],
    signal: AbortSignal,
  ): Promise<ExtendOutcome[]> {
    const outcomes: ExtendOutcome[] = new Array(leases.length)
    const groups: number[][] = []
    if (isCluster(this.#store.client)) {
      const bySlot = new Map<number, number[]>()
      for (let i = 0; i < leases.length; i++) {
        const slot = slotOf(this.#layout.keysOf(leases[i]!.key).lock)
        const group = bySlot.get(slot)
        if (group && group.length < EXTEND_BATCH) group.push(i)
        else {
          if (group) groups.push(group)
          bySlot.set(slot, [i])
        }
      }
      groups.push(...bySlot.values())
    } else {
      for (let i = 0; i < leases.length; i += EXTEND_BATCH) {
        groups.push(Array.from({ length: Math.min(EXTEND_BATCH, leases.length - i) }, (_, j) => i + j))
      }
    }
    // One listener on the signal for the whole batch (a batch of thousands has dozens of groups).
    try {
      await raceSignal(
        Promise.all(groups.map((group) => this.#extendGroup(leases, ttlMs, group, outcomes))),
        signal,
      )
    } catch (error) {
      throw this.#explain(leases[0]!.key, 'extend', error)
    }
    return outcomes
  }

  /** One EXTEND_MANY for the locks at `indices`; writes their outcomes. Never rejects. */
  async #extendGroup(
    leases: readonly HeldLease[],
    ttlMs: readonly number[],
    indices: readonly number[],
    outcomes: ExtendOutcome[],
  ): Promise<void> {
    const keys: string[] = []
    const args: Array<string | number> = []
    for (const i of indices) {
      const lease = leases[i]!
      const k = this.#layout.keysOf(lease.key)
      const before = keys.length
      keys.push(k.lock, k.holder, k.fence)
      if (k.name !== undefined) keys.push(k.name)
      args.push(lease.owner, ttlMs[i]!, keys.length - before)
    }
    try {
      const reply = (await this.#store.run(EXTEND_MANY, keys, args)) as number[]
      for (const [j, i] of indices.entries()) outcomes[i] = reply[j] === 1 ? RENEWED : NOT_RENEWED
    } catch (error) {
      for (const i of indices) outcomes[i] = { error: this.#explain(leases[i]!.key, 'extend', error) }
    }
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    try {
      return await raceSignal(this.#mode.release(lease), signal)
    } catch (error) {
      throw this.#explain(lease.key, 'release', error)
    }
  }

  async abandon(req: R, signal: AbortSignal): Promise<void> {
    // Always, not only after a known-uncertain attempt: an abort can race any reply. Owner-checked on
    // the server, and sent on the connection that carried the attempts, so it lands after all of them.
    await raceSignal(this.#mode.abandon(req), signal)
  }

  async inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    const k = this.#layout.keysOf(key)
    try {
      const [owner, pttl, fence, described] = (await raceSignal(
        this.#store.run(INSPECT, [k.lock, k.fence, k.holder], []),
        signal,
      )) as [string | null, number, string | null, string | null]
      if (owner === null) return fence === null ? null : { held: false, fence: BigInt(fence) }
      return {
        held: true,
        owner,
        ...describedBy(owner, described),
        ...(fence === null ? {} : { fence: BigInt(fence) }),
        ...(pttl >= 0 ? { expiresInMs: pttl } : {}),
        ...(pttl === -1 ? { note: `${k.lock} has no expiry: something outside fencelock wrote it` } : {}),
      }
    } catch (error) {
      throw this.#explain(key, 'inspect', error)
    }
  }

  async *list(prefix: string, signal: AbortSignal): AsyncGenerator<ListedLock> {
    const match = lockKeyMatch(this.#store.prefix)
    for (const server of await this.#store.servers()) {
      for await (const names of scanPages(server, match.pattern, signal)) {
        const found = await keysOf(server, match, this.#store.prefix, names, prefix, signal)
        // One read per lock found (they go out together); a lock freed since the SCAN is left out.
        const views = await Promise.all(found.map(({ key }) => this.inspect(key, signal)))
        for (const [i, view] of views.entries()) if (view?.held) yield { ...found[i]!, ...view }
      }
    }
  }

  async breakLock(key: string, options?: BreakOptions): Promise<BreakResult> {
    const { breakLock } = this.#mode
    if (!breakLock)
      throw new TypeError(`${this.#store.id}: this mode breaks a lock by its owner, not by its key`)
    try {
      const signal = options?.signal ?? new AbortController().signal
      // The script names the grant read here: ioredis resends a command whose reply a dropped connection
      // lost, and a resent "whoever holds it" would end the grant of the waiter the first run woke.
      const aimed = options?.fence ?? (await this.#heldFence(key, signal))
      if (aimed === null) return { broken: false }
      const reply = await raceSignal(breakLock.call(this.#mode, key, aimed), signal)
      const [code, owner, fence, described] = reply as [number, string?, string?, string?]
      if (code === 0 || owner === undefined) return { broken: false }
      const lease = { owner, fence: BigInt(fence || 0), ...describedBy(owner, described) }
      return { broken: code === 1, lease }
    } catch (error) {
      throw this.#explain(key, 'break', error)
    }
  }

  /** The fence of the grant holding `key` (undefined: its fence key is gone), or null when it is free. */
  async #heldFence(key: string, signal: AbortSignal): Promise<bigint | undefined | null> {
    const info = await this.inspect(key, signal)
    return info?.held ? info.fence : null
  }

  waitForMessage(req: AcquireRequest, signal: AbortSignal): Promise<string | undefined> {
    const channel = this.#mode.channel ? this.#mode.channel(req) : this.#layout.keysOf(req.key).channel
    return this.#subscriptions.wait(channel, this.#mode.listener(req), signal, req.owner)
  }

  async waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<Grant | undefined> {
    return this.#mode.handedOver(req, await this.waitForMessage(req, signal))
  }
}

/** An acquire script's reply {granted, fence | ms until worth trying again} as the core's result. */
export function grantOf(reply: unknown, ttlMs: number): AttemptResult {
  const [granted, value] = reply as [number, number]
  if (granted === 1) return { granted: true, fence: BigInt(value), ttlMs }
  return value > 0 ? { granted: false, retryInMs: value } : { granted: false }
}

/**
 * The description in a holder record "<owner> <description>", if the record is the current owner's (a
 * previous holder's record may outlive its lock by a moment, or a grant may have written none).
 */
export function describedBy(owner: string, record: string | null | undefined): { holder?: string } {
  if (!record?.startsWith(`${owner} `) || record.length === owner.length + 1) return {}
  return { holder: record.slice(owner.length + 1) }
}
