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
 *
 * What it shares with the read-write lock (the read-back, the replicas check, the wait) is ../lease-line/.
 */
import { raceSignal } from '../../../core/abort.js'
import {
  type AcquireRequest,
  type AttemptResult,
  type ExtendResult,
  type HeldLease,
  type PermitHolder,
  placeKeptMs,
  type SemaphoreFacet,
  type SemaphoreInfo,
} from '../../../core/backend.js'
import { LimitMismatchError } from '../../../core/errors.js'
import { RedisLeaseLine, type RedisLeaseLineParts } from '../lease-line/facet.js'
import { isReplyError } from '../store.js'
import { type RedisSemaphoreKeys, redisSemaphoreKeys, scriptKeys } from './layout.js'
import { ABANDON, ACQUIRE, EXTEND, HOLDERS, INSPECT, READ_BACK, RELEASE, SET_LIMIT } from './scripts.js'

const ACQUIRING = 'acquire permits of semaphore'

export class RedisSemaphore extends RedisLeaseLine<RedisSemaphoreKeys> implements SemaphoreFacet {
  constructor(parts: RedisLeaseLineParts) {
    super(parts, {
      noun: 'semaphore',
      keysOf: redisSemaphoreKeys,
      scriptKeys,
      readBack: READ_BACK,
      inspect: INSPECT,
    })
  }

  async tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const asked = req.semaphore
    if (!asked) throw new TypeError('A semaphore acquire carries `semaphore` (its limit and permits)')
    const k = this.keysOf(req.key)
    let result: AttemptResult
    try {
      const [kind, value] = (await raceSignal(
        this.run(
          req.key,
          ACQUIRE,
          [
            req.owner,
            req.ttlMs,
            asked.limit,
            asked.permits,
            asked.limitCompared ? '1' : '0',
            req.holder ?? '',
            k.changed,
            placeKeptMs(req.ttlMs),
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
        throw this.explain(req.key, ACQUIRING, error)
      }
      result = await this.readBack(req, ACQUIRING, error, signal)
    }
    return this.replicated(req, result)
  }

  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    try {
      const reply = await raceSignal(
        this.run(lease.key, EXTEND, [lease.owner, lease.fence.toString(), ttlMs]),
        signal,
      )
      return { renewed: reply === 1 }
    } catch (error) {
      throw this.explain(lease.key, 'extend the permits of semaphore', error)
    }
  }

  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    const k = this.keysOf(lease.key)
    try {
      const reply = await raceSignal(
        this.run(lease.key, RELEASE, [lease.owner, lease.fence.toString(), k.changed]),
        signal,
      )
      return reply === 1
    } catch (error) {
      throw this.explain(lease.key, 'release the permits of semaphore', error)
    }
  }

  protected giveUp(req: AcquireRequest): Promise<unknown> {
    return this.run(req.key, ABANDON, [req.owner, this.keysOf(req.key).changed])
  }

  async holders(name: string, signal: AbortSignal): Promise<SemaphoreInfo | null> {
    let reply: Array<string | number> | null
    try {
      reply = (await raceSignal(this.run(name, HOLDERS, []), signal)) as Array<string | number> | null
    } catch (error) {
      throw this.explain(name, 'read the holders of semaphore', error)
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
      await raceSignal(this.run(name, SET_LIMIT, [limit, k.changed]), signal)
    } catch (error) {
      throw this.explain(name, 'set the limit of semaphore', error)
    }
  }
}
