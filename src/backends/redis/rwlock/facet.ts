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
 *
 * What it shares with the semaphore (the read-back, the replicas check, the wait) is ../lease-line/.
 */
import { raceSignal } from '../../../core/abort.js'
import {
  type AcquireRequest,
  type AttemptResult,
  type DowngradeResult,
  type ExtendResult,
  type HeldLease,
  placeKeptMs,
  type RwLockFacet,
  type RwLockHolder,
  type RwLockInfo,
} from '../../../core/backend.js'
import { RedisLeaseLine, type RedisLeaseLineParts } from '../lease-line/facet.js'
import type { Script } from '../lua.js'
import { isReplyError } from '../store.js'
import { type RedisRwLockKeys, redisRwLockKeys, scriptKeys } from './layout.js'
import { ABANDON, ACQUIRE, DOWNGRADE, EXTEND, HOLDERS, INSPECT, READ_BACK, RELEASE } from './scripts.js'

export class RedisRwLock extends RedisLeaseLine<RedisRwLockKeys> implements RwLockFacet {
  constructor(parts: RedisLeaseLineParts) {
    super(parts, {
      noun: 'the read-write',
      keysOf: redisRwLockKeys,
      scriptKeys,
      readBack: READ_BACK,
      inspect: INSPECT,
    })
  }

  /** Runs a writing script of the lock `name`: the channel first, then `args`. */
  #write(name: string, s: Script, args: Array<string | number>, signal?: AbortSignal): Promise<unknown> {
    return this.run(name, s, [this.keysOf(name).changed, ...args], signal)
  }

  async tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const mode = req.rwlock?.mode
    if (!mode) throw new TypeError('A read-write lock acquire carries `rwlock` (its mode)')
    let result: AttemptResult
    try {
      const args = [req.owner, req.ttlMs, mode, req.holder ?? '', placeKeptMs(req.ttlMs)]
      const [granted, value] = (await raceSignal(this.#write(req.key, ACQUIRE, args, signal), signal)) as [
        number,
        number | string,
      ]
      result =
        granted === 1
          ? { granted: true, fence: BigInt(value), ttlMs: req.ttlMs }
          : { granted: false, queued: true, ...(Number(value) > 0 ? { retryInMs: Number(value) } : {}) }
    } catch (error) {
      // An abort or an error reply: the core treats the outcome as unknown and calls `abandon`.
      const what = `acquire (to ${mode}) the read-write`
      if (signal.aborted || isReplyError(error)) throw this.explain(req.key, what, error)
      result = await this.readBack(req, what, error, signal)
    }
    return this.replicated(req, result)
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    try {
      const reply = await raceSignal(
        this.#write(lease.key, EXTEND, [lease.owner, lease.fence.toString(), ttlMs]),
        signal,
      )
      return { renewed: reply === 1 }
    } catch (error) {
      throw this.explain(lease.key, 'extend the read-write', error)
    }
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    try {
      const reply = await raceSignal(
        this.#write(lease.key, RELEASE, [lease.owner, lease.fence.toString()]),
        signal,
      )
      return reply === 1
    } catch (error) {
      throw this.explain(lease.key, 'release the read-write', error)
    }
  }

  protected giveUp(req: AcquireRequest): Promise<unknown> {
    return this.#write(req.key, ABANDON, [req.owner])
  }

  async downgrade(lease: HeldLease, signal: AbortSignal): Promise<DowngradeResult> {
    try {
      const reply = await raceSignal(
        this.#write(lease.key, DOWNGRADE, [lease.owner, lease.fence.toString()]),
        signal,
      )
      return { downgraded: reply === 1 }
    } catch (error) {
      throw this.explain(lease.key, 'downgrade the read-write', error)
    }
  }

  async holders(name: string, signal: AbortSignal): Promise<RwLockInfo | null> {
    let reply: Array<string | number> | null
    try {
      reply = (await raceSignal(this.run(name, HOLDERS, []), signal)) as Array<string | number> | null
    } catch (error) {
      throw this.explain(name, 'read the holders of the read-write', error)
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
}
