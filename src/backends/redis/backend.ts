/**
 * The contract methods of the Redis backend, the same in both modes: one attempt (and the read-back after
 * a lost reply), extend, release, inspect, waiting. What differs between plain and fair mode (which
 * scripts acquire, release and abandon run, which messages wake a waiter) is a `Mode`: plain.ts, fair.ts.
 */
import { raceSignal } from '../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  BreakOptions,
  BreakResult,
  DoctorFinding,
  ExtendOutcome,
  ExtendResult,
  Grant,
  HeldLease,
  ListedLock,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { BackendUnavailableError, quoteKey } from '../../core/errors.js'
import type { RedisClient } from './connect.js'
import { doctor } from './doctor.js'
import { named, slotOf } from './layout.js'
import { keysOf, lockKeyMatch, scanPages } from './listing.js'
import { EXTEND, EXTEND_MANY, INSPECT, RAISE_FENCE } from './scripts.js'
import { isCluster, isReplyError, type RedisStore } from './store.js'
import { Subscriptions } from './subscriptions.js'

/** The Redis backend. */
export interface RedisBackend extends LockBackend {
  /** The lock and fence key names of `key`, for operators. */
  keysOf(key: string): { lock: string; fence: string }
  /**
   * Raises `key`'s fence counter to at least `atLeast` and returns its value afterwards: the single-node
   * step of Redlock's fencing, which writes a minted token back to a majority.
   */
  raiseFence(key: string, atLeast: bigint, signal: AbortSignal): Promise<bigint>
  /**
   * `waitForChange`, resolving with the message that woke it: "-<owner>" when `owner` released the lock,
   * `undefined` when no message did (abort, a fresh subscription). For Redlock, which hears each release
   * once per node.
   */
  waitForMessage(req: AcquireRequest, signal: AbortSignal): Promise<string | undefined>
}

/** What differs between plain and fair mode. */
export interface Mode {
  /** Waiters are served in arrival order. */
  readonly fifo: boolean
  /** One acquire attempt: the script's reply, {1, fence} or {0, ms worth waiting (0: unknown)}. */
  acquire(req: AcquireRequest, signal: AbortSignal): Promise<unknown>
  /** Owner-checked release; false when the lock was no longer ours. */
  release(lease: { key: string; owner: string }): Promise<boolean>
  /**
   * Ends whichever lease holds `key` (only the grant of `fence`, when given) and wakes waiters as a release
   * does: the reply of BREAK (scripts.ts). Absent where a lease is ended otherwise (Redlock's nodes).
   */
  breakLock?(key: string, fence: bigint | undefined): Promise<unknown>
  /** Removes whatever `req.owner` may hold or have queued for `req.key`, owner-checked. */
  abandon(req: AcquireRequest): Promise<unknown>
  /** The owner whose messages wake this waiter, or undefined when any message does. */
  listener(req: AcquireRequest): string | undefined
  /** The channel this waiter listens on. @default the key's own channel (`keysOf(key).channel`) */
  channel?(req: AcquireRequest): string
  /** The grant that the message which woke `req` handed to it, if it did. */
  handedOver(req: AcquireRequest, message: string | undefined): Grant | undefined
  /**
   * The attempt's result from its acquire script's reply, when the mode's script answers more than
   * {granted, fence | ms} (Redlock's line: the waiter's ticket too). @default grantOf
   */
  answer?(reply: unknown, ttlMs: number): AttemptResult
}

/**
 * Keys: the name goes into three key names and a channel name (Redis allows 512 MB; a lock name of more
 * than 64 KiB is a mistake). Leases: PX is a signed 64-bit count of ms added to the server's clock; 2^43 ms
 * (about 278 years) stays exact in a JavaScript number and far from that overflow.
 */
export const REDIS_LIMITS = { maxKeyBytes: 65_536, maxTtlMs: 2 ** 43 } as const

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

/**
 * One Redis backend. Its state has names: the store it speaks to, the mode, the replica policy and the
 * shared subscriptions. Its methods live on the prototype: wrap it (`{ ...backend }` copies none of them)
 * by delegating to it, not by spreading it.
 */
export class RedisLockBackend implements RedisBackend {
  readonly id: string
  readonly capabilities: LockBackend['capabilities']
  readonly limits = REDIS_LIMITS
  readonly #store: RedisStore
  readonly #mode: Mode
  readonly #replicas: ReplicaPolicy
  readonly #subscriptions: Subscriptions
  /** The clients this backend opened (from a URL, and the pub/sub duplicate): closed with it. */
  readonly #owned: readonly RedisClient[]

  /** `owned`: the clients made from a URL; the pub/sub connection joins them when it opens. */
  constructor(store: RedisStore, mode: Mode, replicas: ReplicaPolicy, owned: RedisClient[]) {
    this.id = store.id
    // localHint: a wait only joins the subscriber connection's waiters (Subscriptions): a channel already
    // subscribed hears every message handled after that, and a fresh SUBSCRIBE wakes its waiters once the
    // server confirms it (a release published before then is caught by the re-attempt).
    this.capabilities = { expiry: 'server-ttl', notify: true, fifo: mode.fifo, localHint: true }
    this.#store = store
    this.#mode = mode
    this.#replicas = replicas
    this.#subscriptions = new Subscriptions(store.client, owned)
    this.#owned = owned
  }

  keysOf(key: string): { lock: string; fence: string } {
    const k = this.#store.keysOf(key)
    return { lock: k.lock, fence: k.fence }
  }

  async tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    let result: AttemptResult
    try {
      const reply = await raceSignal(this.#mode.acquire(req, signal), signal)
      result = this.#mode.answer ? this.#mode.answer(reply, req.ttlMs) : grantOf(reply, req.ttlMs)
    } catch (error) {
      // An abort (the core's deadline, the caller) or an error reply: the core treats the outcome as
      // unknown and calls `abandon`, which removes any hold of this owner once this attempt has settled.
      if (signal.aborted || isReplyError(error)) throw this.#store.explain(req.key, 'acquire', error)
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
    const k = this.#store.keysOf(req.key)
    const read = (await raceSignal(this.#store.run(INSPECT, [k.lock, k.fence], []), signal).catch(
      () => undefined,
    )) as [string | null, number, string | null] | undefined
    if (!read || read[0] !== req.owner || read[1] <= 0) throw this.#store.explain(req.key, 'acquire', error)
    return { granted: true, fence: BigInt(read[2] ?? 0), ttlMs: read[1] }
  }

  /** WAIT on the connection that wrote the lock; too few acknowledgements: release it and fail. */
  async #awaitReplicas(req: AcquireRequest, grant: AttemptResult): Promise<AttemptResult> {
    const { min, timeoutMs } = this.#replicas
    const acks = await this.#store.replicasAcknowledging(min, timeoutMs)
    if (acks >= min) return grant
    await this.#mode.release(req)
    throw new BackendUnavailableError(
      `Only ${acks} of the ${min} replicas required by \`minReplicas\` acknowledged lock ${quoteKey(req.key)} on ` +
        `${this.id} within ${timeoutMs} ms, so it was released. Check the replicas (INFO replication)`,
      { key: req.key, backend: this.id },
    )
  }

  async raiseFence(key: string, atLeast: bigint, signal: AbortSignal): Promise<bigint> {
    const k = this.#store.keysOf(key)
    try {
      return BigInt(
        (await raceSignal(this.#store.run(RAISE_FENCE, [k.fence], [String(atLeast)]), signal)) as number,
      )
    } catch (error) {
      throw this.#store.explain(key, 'record the fence of', error)
    }
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    const k = this.#store.keysOf(lease.key)
    try {
      const reply = await raceSignal(
        this.#store.run(EXTEND, [k.lock, k.holder, k.fence, ...named(k)], [lease.owner, ttlMs]),
        signal,
      )
      return reply === 1 ? { renewed: true } : { renewed: false }
    } catch (error) {
      throw this.#store.explain(lease.key, 'extend', error)
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
        const slot = slotOf(this.#store.keysOf(leases[i]!.key).lock)
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
      throw this.#store.explain(leases[0]!.key, 'extend', error)
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
      const k = this.#store.keysOf(lease.key)
      const before = keys.length
      keys.push(k.lock, k.holder, k.fence)
      if (k.name !== undefined) keys.push(k.name)
      args.push(lease.owner, ttlMs[i]!, keys.length - before)
    }
    try {
      const reply = (await this.#store.run(EXTEND_MANY, keys, args)) as number[]
      for (const [j, i] of indices.entries()) outcomes[i] = reply[j] === 1 ? RENEWED : NOT_RENEWED
    } catch (error) {
      for (const i of indices) outcomes[i] = { error: this.#store.explain(leases[i]!.key, 'extend', error) }
    }
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    try {
      return await raceSignal(this.#mode.release(lease), signal)
    } catch (error) {
      throw this.#store.explain(lease.key, 'release', error)
    }
  }

  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    // Always, not only after a known-uncertain attempt: an abort can race any reply. Owner-checked on
    // the server, and sent on the connection that carried the attempts, so it lands after all of them.
    await raceSignal(this.#mode.abandon(req), signal)
  }

  async inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    const k = this.#store.keysOf(key)
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
      throw this.#store.explain(key, 'inspect', error)
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
    if (!breakLock) throw new TypeError(`${this.id}: this mode breaks a lock by its owner, not by its key`)
    try {
      const signal = options?.signal ?? new AbortController().signal
      const reply = await raceSignal(breakLock.call(this.#mode, key, options?.fence), signal)
      const [code, owner, fence, described] = reply as [number, string?, string?, string?]
      if (code === 0 || owner === undefined) return { broken: false }
      const lease = { owner, fence: BigInt(fence || 0), ...describedBy(owner, described) }
      return { broken: code === 1, lease }
    } catch (error) {
      throw this.#store.explain(key, 'break', error)
    }
  }

  waitForMessage(req: AcquireRequest, signal: AbortSignal): Promise<string | undefined> {
    const channel = this.#mode.channel ? this.#mode.channel(req) : this.#store.keysOf(req.key).channel
    return this.#subscriptions.wait(channel, this.#mode.listener(req), signal, req.owner)
  }

  async waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<Grant | undefined> {
    return this.#mode.handedOver(req, await this.waitForMessage(req, signal))
  }

  doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    return doctor(this.#store.client, this.id, this.#replicas.min, signal, this.#store.prefix)
  }

  async close(): Promise<void> {
    await this.#subscriptions.close()
    // disconnect, not QUIT: QUIT waits in the offline queue of a client that cannot connect.
    for (const c of this.#owned) c.disconnect()
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
