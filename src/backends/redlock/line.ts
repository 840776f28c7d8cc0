/**
 * One Redlock node's lock, with its waiting line (src/engines/quorum-line.ts for the protocol): the Redis
 * backend (its store, errors, read-back after a lost reply, extend, inspect, pub/sub) in a mode whose
 * scripts are the LINE_* scripts (scripts.ts). A waiter stands in line as "<owner id>@<client id>" and
 * listens on its client's own channel (layout.ts), where a node names it when it is first: a release wakes
 * only the waiter whose turn it is, in its own process.
 */
import type { AcquireRequest, AttemptResult } from '../../core/backend.js'
import { acquireOwner } from '../../engines/quorum-inspect.js'
import type { NodeRequest } from '../../engines/quorum-line.js'
import { type Mode, type RedisBackend, RedisLockBackend } from '../redis/backend.js'
import type { RedisClient } from '../redis/connect.js'
import { DEFAULT_PREFIX, named, nameOf } from '../redis/layout.js'
import { describeClient, RedisStore } from '../redis/store.js'
import { lineKeys, nodeCounter, wakePrefix } from './layout.js'
import { LINE_ACQUIRE, LINE_BREAK, LINE_CLEAN_UP, LINE_LEAVE, LINE_RELEASE, RAISE } from './scripts.js'

/**
 * A node's lock: the Redis backend over `client` in line mode, and the mode itself (for the clean-up).
 * `clientId` names the Redlock backend, the same on every node: its waiters' channel.
 */
export function lineBackend(
  client: RedisClient,
  clientId: string,
  prefix = DEFAULT_PREFIX,
): { backend: RedisBackend; line: LineMode } {
  const store = new RedisStore(client, { prefix, id: describeClient(client), owned: [] })
  const line = new LineMode(store, prefix, clientId)
  return { backend: new RedisLockBackend(store, line, { min: 0, timeoutMs: 1000 }, []), line }
}

export class LineMode implements Mode {
  /** One node grants in ticket order; the quorum is ordered as the engine says (quorum-line.ts). */
  readonly fifo = true
  readonly #store: RedisStore
  readonly #prefix: string
  readonly #clientId: string
  /** Where this client's waiters are named (layout.ts). */
  readonly #wakePrefix: string
  readonly #channel: string
  /** The node's fence counter (layout.ts). */
  readonly #counter: string

  constructor(store: RedisStore, prefix: string, clientId: string) {
    this.#store = store
    this.#prefix = prefix
    this.#clientId = clientId
    this.#wakePrefix = wakePrefix(prefix)
    this.#channel = `${this.#wakePrefix}${clientId}`
    this.#counter = nodeCounter(prefix)
  }

  /** A waiter as it stands in line: its acquire's owner id and this client's id. */
  #waiter(owner: string): string {
    return `${acquireOwner(owner)}@${this.#clientId}`
  }

  /** KEYS of the LINE_* scripts, in their order (see scripts.ts). */
  #keys(key: string): string[] {
    const k = this.#store.keysOf(key)
    const l = lineKeys(key, this.#prefix)
    return [k.lock, k.fence, k.holder, l.line, l.alive, this.#counter, ...named(k)]
  }

  /**
   * The write-back of a grant's token M (scripts.ts RAISE): the node's counter to at least M, and the
   * hold's fence too while attempt `owner` holds `key` here. The counter afterwards.
   */
  async raiseFence(key: string, owner: string, atLeast: bigint): Promise<bigint> {
    const k = this.#store.keysOf(key)
    const reply = await this.#store.run(RAISE, [this.#counter, k.fence, k.lock], [String(atLeast), owner])
    return BigInt(reply as number)
  }

  /** The node's counter (0n before its first grant): every later grant on the node mints more. */
  async counter(): Promise<bigint> {
    return BigInt((await this.#store.run(RAISE, [this.#counter], ['0'])) as number)
  }

  /** `req` is the engine's NodeRequest: its owner is the attempt's, `waiter` the acquire's. */
  acquire(req: AcquireRequest, signal: AbortSignal): Promise<unknown> {
    const { waiter, ticket, livenessMs } = req as NodeRequest
    return this.#store.run(
      LINE_ACQUIRE,
      this.#keys(req.key),
      [
        req.owner,
        req.ttlMs,
        req.holder ?? '',
        this.#waiter(waiter),
        ticket,
        livenessMs,
        ...nameOf(this.#store.keysOf(req.key), req.key),
      ],
      signal,
    )
  }

  /** {1, fence} or {0, ms worth waiting, ticket}: the ticket goes to the engine with the refusal. */
  answer(reply: unknown, ttlMs: number): AttemptResult {
    const [granted, value, ticket] = reply as [number, number, number]
    if (granted === 1) return { granted: true, fence: BigInt(value), ttlMs }
    const refused = { granted: false as const, ticket }
    return value > 0 ? { ...refused, retryInMs: value } : refused
  }

  /** The holder's release: it also leaves the line, and the first waiter left is woken. */
  async release(lease: { key: string; owner: string }): Promise<boolean> {
    const args = [lease.owner, this.#wakePrefix, this.#waiter(lease.owner)]
    return (await this.#store.run(LINE_RELEASE, this.#keys(lease.key), args)) === 1
  }

  /** The clean-up of a lost attempt: its acquire keeps its place in line. */
  async cleanUp(lease: { key: string; owner: string }): Promise<boolean> {
    const args = [lease.owner, this.#wakePrefix, this.#waiter(lease.owner)]
    return (await this.#store.run(LINE_CLEAN_UP, this.#keys(lease.key), args)) === 1
  }

  /** An operator's break of the hold of attempt `owner` (an owner id on the nodes): true if it ended it. */
  async breakHold(key: string, owner: string): Promise<boolean> {
    const args = [owner, this.#wakePrefix, acquireOwner(owner)]
    return (await this.#store.run(LINE_BREAK, this.#keys(key), args)) === 1
  }

  /** An acquire that gave up: its latest attempt's hold, if any, and its place in line go. */
  abandon(req: AcquireRequest): Promise<unknown> {
    const args = [req.owner, this.#wakePrefix, this.#waiter(req.owner)]
    return this.#store.run(LINE_LEAVE, this.#keys(req.key), args)
  }

  /** A waiter wakes for the messages naming it: first in line now. */
  listener(req: AcquireRequest): string {
    return req.owner
  }

  /** This client's own channel, the same for all its waiters and keys. */
  channel(): string {
    return this.#channel
  }

  /** Nothing is handed over on the server: the first waiter re-attempts. */
  handedOver(): undefined {
    return undefined
  }
}
