/**
 * One Redlock node's lock, with its waiting line (src/engines/quorum-line.ts for the protocol): the Redis
 * backend (its store, errors, read-back after a lost reply, extend, inspect, pub/sub) in a mode whose
 * scripts are the LINE_* scripts (scripts.ts). A waiter is woken only by a release that names it first in
 * line (or by one with nobody in line), not every waiter of the client.
 */
import type { AcquireRequest, AttemptResult } from '../../core/backend.js'
import { acquireOwner } from '../../engines/quorum-inspect.js'
import type { NodeRequest } from '../../engines/quorum-line.js'
import { type Mode, type RedisBackend, RedisLockBackend } from '../redis/backend.js'
import type { RedisClient } from '../redis/connect.js'
import { DEFAULT_PREFIX } from '../redis/layout.js'
import { describeClient, RedisStore } from '../redis/store.js'
import { lineKeys } from './layout.js'
import { LINE_ACQUIRE, LINE_CLEAN_UP, LINE_LEAVE, LINE_RELEASE } from './scripts.js'

/** A node's lock: the Redis backend over `client` in line mode, and the mode itself (for the clean-up). */
export function lineBackend(
  client: RedisClient,
  prefix = DEFAULT_PREFIX,
): { backend: RedisBackend; line: LineMode } {
  const store = new RedisStore(client, { prefix, id: describeClient(client), owned: [] })
  const line = new LineMode(store, prefix)
  return { backend: new RedisLockBackend(store, line, { min: 0, timeoutMs: 0 }, []), line }
}

export class LineMode implements Mode {
  /** One node grants in ticket order; the quorum is ordered as the engine says (quorum-line.ts). */
  readonly fifo = true
  readonly #store: RedisStore
  readonly #prefix: string

  constructor(store: RedisStore, prefix: string) {
    this.#store = store
    this.#prefix = prefix
  }

  /** KEYS of the LINE_* scripts, in their order (see scripts.ts). */
  #keys(key: string): string[] {
    const k = this.#store.keysOf(key)
    const l = lineKeys(key, this.#prefix)
    return [k.lock, k.fence, k.holder, l.line, l.alive]
  }

  /** `req` is the engine's NodeRequest: its owner is the attempt's, `waiter` the acquire's. */
  acquire(req: AcquireRequest, signal: AbortSignal): Promise<unknown> {
    const { waiter, ticket, livenessMs } = req as NodeRequest
    return this.#store.run(
      LINE_ACQUIRE,
      this.#keys(req.key),
      [req.owner, req.ttlMs, req.holder ?? '', waiter, ticket, livenessMs],
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
    const args = [lease.owner, this.#store.keysOf(lease.key).channel, acquireOwner(lease.owner)]
    return (await this.#store.run(LINE_RELEASE, this.#keys(lease.key), args)) === 1
  }

  /** The clean-up of a lost attempt: its acquire keeps its place in line. */
  async cleanUp(lease: { key: string; owner: string }): Promise<boolean> {
    const args = [lease.owner, this.#store.keysOf(lease.key).channel, acquireOwner(lease.owner)]
    return (await this.#store.run(LINE_CLEAN_UP, this.#keys(lease.key), args)) === 1
  }

  /** An acquire that gave up: its latest attempt's hold, if any, and its place in line go. */
  abandon(req: AcquireRequest): Promise<unknown> {
    const { waiter } = req as NodeRequest
    const args = [req.owner, this.#store.keysOf(req.key).channel, waiter ?? acquireOwner(req.owner)]
    return this.#store.run(LINE_LEAVE, this.#keys(req.key), args)
  }

  /** A waiter wakes for the messages naming it (first in line) and for "-<owner>" (nobody in line). */
  listener(req: AcquireRequest): string {
    return req.owner
  }

  /** Nothing is handed over on the server: the first waiter re-attempts. */
  handedOver(): undefined {
    return undefined
  }
}
