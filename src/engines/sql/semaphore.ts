/**
 * Counting semaphores on the sql engine (PostgreSQL, MySQL/MariaDB): the engine decides, the adapter
 * (semaphore-adapter.ts) stores, in a semaphores table and a permits table beside the lock table.
 *
 * - Acquire: ONE transaction that locks the semaphore's row (created with the asked limit when missing),
 *   refuses a mismatched limit, deletes the permits and places that ended on the server's clock, reads the
 *   rest (locking), and grants when the permits fit beside the valid grants and nobody is ahead in line
 *   (the line: places by arrival), else keeps the caller's place for max(ttl, 3 s). So at most `limit`
 *   permits are held by unexpired grants: every grant is decided under the semaphore's lock, after the
 *   ended grants were purged, counting every grant left.
 * - Sequence: the store-wide source's (see the adapter), above the latest one read under the lock: it
 *   never goes back, also after an idle semaphore's rows were deleted.
 * - Renewal: ONE statement on the grant, owner and sequence checked. Release and abandon: a transaction
 *   that locks the semaphore, deletes the grant (abandon: the grant or the place of the acquire's owner),
 *   deletes the semaphore's row when no permit row is left, and wakes waiters. Abandon runs for every
 *   acquire that sent a transaction, whatever came back: one that failed may still have committed (a lost
 *   reply to its COMMIT). Only an acquire that never sent one (it gave up during the table check) skips it.
 * - Expiry on the server's clock only: the purge compares with it; the engine never reads a timestamp.
 * - Waiting: where the adapter notifies (PostgreSQL), one channel per semaphores table whose payload is the
 *   name; a release, an abandon, a `setLimit`, and a grant while others wait notify, and every waiter of the
 *   name in this process wakes to ask (only the first in line can be granted). Without notifications
 *   (MySQL/MariaDB) the core polls, at most once a second and at the soonest lease end the store reported.
 * - Housekeeping: after a grant, at most once per `RETIRE_EVERY_MS` per client, one transaction deletes up to
 *   `RETIRE_BATCH` idle semaphores whose holders and waiters all ended (crashed ones) and their rows.
 *
 * Statements, without faults: acquire 1 transaction of 4-6, renewal 1, release 1 transaction of 4.
 */
import { raceSignal } from '../../core/abort.js'
import {
  type AcquireRequest,
  type AttemptResult,
  type DoctorFinding,
  type HeldLease,
  type LockInfo,
  placeKeptMs,
  type SemaphoreFacet,
  type SemaphoreInfo,
} from '../../core/backend.js'
import { LimitMismatchError } from '../../core/errors.js'
import type { SqlLeaseOptions } from './engine.js'
import { LineTables, RETIRE_BATCH } from './line-tables.js'
import type { SqlPermitRow, SqlSemaphoreAdapter } from './semaphore-adapter.js'
import type { SqlWaiting } from './wait.js'

/** The semaphore facet over `adapter`'s tables, and what its close must end (the subscription). */
export function sqlSemaphore(
  adapter: SqlSemaphoreAdapter,
  options: SqlLeaseOptions = {},
): {
  readonly facet: SemaphoreFacet
  doctor(signal: AbortSignal): Promise<DoctorFinding[]>
  close(): Promise<void>
} {
  const engine = new SqlSemaphore(adapter, options)
  const facet: SemaphoreFacet = {
    id: options.id ?? adapter.id,
    capabilities: { expiry: 'server-ttl', notify: engine.waiting.notifies, fifo: true },
    limits: adapter.limits,
    tryAcquire: (req, signal) => engine.attempt(req, signal),
    extend: (lease, ttlMs, signal) => engine.extend(lease, ttlMs, signal),
    release: (lease) => engine.release(lease),
    abandon: (req) => engine.abandon(req),
    inspect: (key, signal) => engine.inspect(key, signal),
    holders: (key, signal) => engine.holders(key, signal),
    setLimit: (key, limit) => engine.setLimit(key, limit),
    ...(engine.waiting.notifies
      ? {
          waitForChange: (req: AcquireRequest, signal: AbortSignal) =>
            engine.waiting.observe(req.key, signal),
        }
      : {}),
  }
  return { facet, doctor: (signal) => engine.doctor(signal), close: () => engine.close() }
}

type Attempt =
  | { readonly mismatch: number }
  | { readonly sequence: bigint; readonly leaseMs: number }
  | { readonly queued: true; readonly soonestMs: number | undefined }

export class SqlSemaphore {
  readonly #adapter: SqlSemaphoreAdapter
  readonly #id: string
  readonly #line: LineTables

  constructor(adapter: SqlSemaphoreAdapter, options: SqlLeaseOptions = {}) {
    this.#adapter = adapter
    this.#id = options.id ?? adapter.id
    this.#line = new LineTables(adapter, options, 'semaphore')
  }

  get waiting(): SqlWaiting {
    return this.#line.waiting
  }

  /** One attempt (`SemaphoreFacet.tryAcquire`): granted, refused for a mismatched limit, or queued. */
  async attempt(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const asked = req.semaphore
    if (!asked) throw new TypeError('A semaphore acquire carries `semaphore` (its limit and permits)')
    await this.#line.tables.ready(signal)
    const { key, owner, ttlMs, holder } = req
    // Before it is sent: from here on it may commit whatever we hear (abandon must undo it).
    this.#line.sent.set(owner, true)
    let out: Attempt
    try {
      // Not raced against the signal: an abandon after it must run after it on the server.
      out = await this.#adapter.transaction('acquire permits of', key, async (tx): Promise<Attempt> => {
        const sem = (await tx.lock(key, asked.limit))!
        if (sem.limit !== asked.limit && !asked.limitCompared) return { mismatch: sem.limit }
        await tx.purge(key)
        const rows = await tx.rows(key, true)
        const mine = rows.find((row) => row.owner === owner)
        // An earlier attempt of this acquire was granted (its reply lost): that grant, as it stands.
        if (mine?.granted) return { sequence: mine.sequence, leaseMs: mine.remainingMs }
        const grants = rows.filter((row) => row.granted)
        const line = rows.filter((row) => !row.granted).sort(bySequence)
        let after = sem.latest
        for (const row of rows) if (row.sequence > after) after = row.sequence
        const write = { key, owner, permits: asked.permits, holder, after }
        const first = line[0]
        if (heldOf(grants) + asked.permits <= sem.limit && (first === undefined || first.owner === owner)) {
          const sequence = await tx.grant({ ...write, ms: ttlMs })
          // The next in line may fit beside this grant: let it ask.
          if (line.some((place) => place.owner !== owner)) await tx.notify(key)
          return { sequence, leaseMs: ttlMs }
        }
        await tx.queue({ ...write, ms: placeKeptMs(ttlMs) })
        const soonest = Math.min(...grants.map((row) => row.remainingMs))
        return { queued: true, soonestMs: Number.isFinite(soonest) ? Math.max(0, soonest) : undefined }
      })
    } catch (error) {
      // The tables may be gone (an operator dropped them): the next attempt checks them again.
      this.#line.tables.forget()
      throw error
    }
    if ('mismatch' in out) throw new LimitMismatchError(out.mismatch, asked.limit, { key, backend: this.#id })
    if ('sequence' in out) {
      this.#retire()
      return { granted: true, fence: out.sequence, ttlMs: Math.min(ttlMs, out.leaseMs) }
    }
    return {
      granted: false,
      queued: true,
      ...(out.soonestMs === undefined ? {} : { retryInMs: out.soonestMs + 1 }),
    }
  }

  /** `extend`: the grant's lease restarted, if it is still there; an unknown outcome settled by a read. */
  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal) {
    try {
      const set = await this.#adapter.extend(lease.key, lease.owner, lease.fence, ttlMs, signal)
      if (set === undefined) return { renewed: false } as const
      return { renewed: true, ttlMs: Math.min(ttlMs, set) } as const
    } catch (error) {
      if (!(await this.#stillOurs(lease, error))) return { renewed: false } as const
      throw error
    }
  }

  /** `release`: deletes the grant (owner and sequence checked); false when it was gone. */
  async release(lease: HeldLease): Promise<boolean> {
    try {
      return await this.#remove(lease.key, lease.owner, lease.fence, 'release permits of')
    } catch (error) {
      // Gone: our release ran (or the lease had ended and was purged); there: once more.
      if (!(await this.#stillOurs(lease, error))) return true
      return await this.#remove(lease.key, lease.owner, lease.fence, 'release permits of')
    }
  }

  /**
   * `abandon`: whatever the acquire's owner holds or where it waits, owner-checked; nothing when it never
   * sent a transaction. Not gated on the table check, which a failed attempt resets although its
   * transaction may have committed. Tables dropped since: the statement fails, and the core ignores it.
   */
  async abandon(req: AcquireRequest): Promise<void> {
    if (!this.#line.sent.has(req.owner)) return
    await this.#remove(req.key, req.owner, undefined, 'give up the acquire of')
    this.#line.sent.delete(req.owner)
  }

  async inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    const view = await this.#read(key, signal)
    const latest = view?.sem.latest || (await this.#adapter.latestSequence?.(signal))
    if (latest === undefined || latest === 0n) return view === undefined ? null : { held: false }
    return { held: (view?.grants.length ?? 0) > 0, fence: latest }
  }

  async holders(key: string, signal: AbortSignal): Promise<SemaphoreInfo | null> {
    const view = await this.#read(key, signal)
    if (view === undefined) return null
    return {
      limit: view.sem.limit,
      held: heldOf(view.grants),
      holders: view.grants.map((row) => ({
        owner: row.owner,
        ...(row.holder === undefined ? {} : { holder: row.holder }),
        permits: row.permits,
        sequence: row.sequence,
        expiresInMs: Math.floor(row.remainingMs),
      })),
      waiting: view.waiting,
    }
  }

  async setLimit(key: string, limit: number): Promise<void> {
    await this.#line.tables.ready(new AbortController().signal)
    await this.#adapter.transaction('set the limit of', key, async (tx) => {
      await tx.setLimit(key, limit)
      await tx.notify(key)
    })
  }

  doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    return this.#line.doctor(signal)
  }

  close(): Promise<void> {
    return this.#line.close()
  }

  /** Deletes `owner`'s grant (or, `sequence` undefined, its grant or place), forgets an idle semaphore, wakes. */
  #remove(key: string, owner: string, sequence: bigint | undefined, what: string): Promise<boolean> {
    return this.#adapter.transaction(what, key, async (tx) => {
      await tx.lock(key)
      const removed = await tx.remove(key, owner, sequence)
      if (!removed) return false
      await tx.forgetIfIdle(key)
      await tx.notify(key)
      return true
    })
  }

  /** Whether `lease`'s grant is still there, after a statement whose outcome is unknown (else its error). */
  async #stillOurs(lease: HeldLease, error: unknown): Promise<boolean> {
    let rows: SqlPermitRow[]
    try {
      rows = await this.#adapter.transaction('read', lease.key, (tx) => tx.rows(lease.key, false))
    } catch {
      throw error
    }
    return rows.some((row) => row.owner === lease.owner && row.granted && row.sequence === lease.fence)
  }

  /** The semaphore as the store keeps it now: its row, its valid grants, how many places are kept. */
  async #read(key: string, signal: AbortSignal) {
    if (!(await this.#line.tables.there(signal))) return undefined
    const read = this.#adapter.transaction('read', key, async (tx) => {
      const sem = await tx.peek(key)
      return sem === undefined ? undefined : { sem, rows: await tx.rows(key, false) }
    })
    const got = await raceSignal(read, signal)
    if (got === undefined) return undefined
    const live = got.rows.filter((row) => row.remainingMs > 0)
    return {
      sem: got.sem,
      grants: live.filter((row) => row.granted),
      waiting: live.filter((row) => !row.granted).length,
    }
  }

  /** Deletes idle semaphores whose grants and places all ended, in the background of a grant. */
  #retire(): void {
    this.#line.retire(() =>
      this.#adapter.transaction('retire idle semaphores', undefined, async (tx) => {
        const names = await tx.idle(RETIRE_BATCH)
        for (const name of names) {
          await tx.purge(name)
          await tx.forgetIfIdle(name)
        }
        return names.length
      }),
    )
  }
}

function heldOf(grants: readonly SqlPermitRow[]): number {
  let held = 0
  for (const row of grants) held += row.permits
  return held
}

function bySequence(a: SqlPermitRow, b: SqlPermitRow): number {
  return a.sequence < b.sequence ? -1 : a.sequence > b.sequence ? 1 : 0
}
