/**
 * An election on one Redlock node: the node's part of the quorum election (src/engines/quorum/election.ts),
 * in line as a lock is (../line.ts), with the leader's value beside the hold (scripts.ts). Its waiters are
 * woken on the lock's channel of this client (`<prefix>!wake:<client id>`: waiter ids are random, so the
 * lock's and the election's never meet), and its observers by the `changed` channel of the Redis
 * election's layout, which the node's own Redis election watches (../adapter.ts).
 */
import { raceSignal } from '../../../core/abort.js'
import type { ExtendResult, HeldLease, LockInfo } from '../../../core/backend.js'
import type { LockError } from '../../../core/errors.js'
import { acquireOwner } from '../../../engines/quorum/inspect.js'
import type { NodeAttempt, NodeRequest } from '../../../engines/quorum/line.js'
import { INSPECT } from '../../redis/election/scripts.js'
import { describedBy } from '../../redis/mutex/facet.js'
import { EXTEND } from '../../redis/mutex/scripts.js'
import { isReplyError, type RedisStore } from '../../redis/store.js'
import type { NodeLock } from '../adapter.js'
import { electionKeys, nodeCounter, wakePrefix } from '../layout.js'
import { RAISE } from '../scripts.js'
import {
  ELECTION_ACQUIRE,
  ELECTION_CLEAN_UP,
  ELECTION_LEAVE,
  ELECTION_PROCLAIM,
  ELECTION_RESIGN,
} from './scripts.js'

export class ElectionLine implements NodeLock {
  readonly #store: RedisStore
  readonly #clientId: string
  readonly #wakePrefix: string
  readonly #counter: string

  constructor(store: RedisStore, clientId: string) {
    this.#store = store
    this.#clientId = clientId
    this.#wakePrefix = wakePrefix(store.prefix)
    this.#counter = nodeCounter(store.prefix)
  }

  keysOf(name: string): ReturnType<typeof electionKeys> {
    return electionKeys(name, this.#store.prefix)
  }

  /** KEYS of the ELECTION_* scripts, in their order (scripts.ts). */
  #keys(name: string): string[] {
    const k = this.keysOf(name)
    return [k.leader, k.term, k.holder, k.line, k.alive, this.#counter, k.value]
  }

  /** A waiter as it stands in line: its campaign's owner id and this client's id (as the lock's). */
  #waiter(owner: string): string {
    return `${acquireOwner(owner)}@${this.#clientId}`
  }

  #explain(name: string, what: string, error: unknown): LockError {
    const k = this.keysOf(name)
    return this.#store.explain(name, what, error, [k.leader, k.term, k.value])
  }

  async tryAcquire(req: NodeRequest, signal: AbortSignal): Promise<NodeAttempt> {
    const k = this.keysOf(req.key)
    const args = [
      req.owner,
      req.ttlMs,
      req.holder ?? '',
      this.#waiter(req.waiter),
      req.ticket,
      req.livenessMs,
    ]
    try {
      const reply = await raceSignal(
        this.#store.run(ELECTION_ACQUIRE, this.#keys(req.key), [...args, req.value ?? '', k.changed], signal),
        signal,
      )
      const [granted, value, ticket] = reply as [number, number, number]
      if (granted === 1) return { granted: true, fence: BigInt(value) }
      return value > 0 ? { granted: false, retryInMs: value, ticket } : { granted: false, ticket }
    } catch (error) {
      // As the lock's (redis/mutex/facet.ts): an abort or an error reply is unknown (the engine cleans up);
      // no reply at all is settled by a read (the engine times the lease from before the attempt).
      if (signal.aborted || isReplyError(error)) throw this.#explain(req.key, 'campaign for election', error)
      const read = await this.#read(req.key, signal).catch(() => undefined)
      if (!read || read[0] !== req.owner || read[1] <= 0 || read[2] === null) {
        throw this.#explain(req.key, 'campaign for election', error)
      }
      return { granted: true, fence: BigInt(read[2]) }
    }
  }

  /** The leader, its remaining ms, its term here, the value and holder records (the Redis election's INSPECT). */
  #read(name: string, signal: AbortSignal) {
    const k = this.keysOf(name)
    return raceSignal(this.#store.run(INSPECT, [k.leader, k.term, k.value, k.holder], []), signal) as Promise<
      [string | null, number, string | null, string | null, string | null]
    >
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    const k = this.keysOf(lease.key)
    try {
      // The value moves with the leader; the term and holder are kept at least as long.
      const reply = await raceSignal(
        this.#store.run(EXTEND, [k.leader, k.value, k.term, k.holder], [lease.owner, ttlMs]),
        signal,
      )
      return { renewed: reply === 1 }
    } catch (error) {
      throw this.#explain(lease.key, 'extend the leadership of election', error)
    }
  }

  /** Replaces the value while attempt `lease.owner` leads here: true, or false when it does not. */
  async proclaim(lease: HeldLease, value: string, signal: AbortSignal): Promise<boolean> {
    const k = this.keysOf(lease.key)
    try {
      const reply = await raceSignal(
        this.#store.run(ELECTION_PROCLAIM, [k.leader, k.value], [lease.owner, value, k.changed]),
        signal,
      )
      return reply === 1
    } catch (error) {
      throw this.#explain(lease.key, 'proclaim a value in election', error)
    }
  }

  #over(script: typeof ELECTION_RESIGN, lease: { key: string; owner: string }): Promise<unknown> {
    const args = [lease.owner, this.#wakePrefix, this.#waiter(lease.owner), this.keysOf(lease.key).changed]
    return this.#store.run(script, this.#keys(lease.key), args)
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    try {
      return (await raceSignal(this.#over(ELECTION_RESIGN, lease), signal)) === 1
    } catch (error) {
      throw this.#explain(lease.key, 'resign from election', error)
    }
  }

  async cleanUp(lease: { key: string; owner: string }): Promise<boolean> {
    return (await this.#over(ELECTION_CLEAN_UP, lease)) === 1
  }

  async abandon(req: NodeRequest, signal: AbortSignal): Promise<void> {
    await raceSignal(this.#over(ELECTION_LEAVE, req), signal)
  }

  async raiseFence(name: string, owner: string, atLeast: bigint): Promise<bigint> {
    const k = this.keysOf(name)
    const reply = await this.#store.run(RAISE, [this.#counter, k.term, k.leader], [String(atLeast), owner])
    return BigInt(reply as number)
  }

  async counter(): Promise<bigint> {
    return BigInt((await this.#store.run(RAISE, [this.#counter], ['0'])) as number)
  }

  async inspect(name: string, signal: AbortSignal): Promise<LockInfo | null> {
    try {
      const [owner, pttl, term, value, described] = await this.#read(name, signal)
      if (owner === null) return null
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
}
