/**
 * Read-write locks on the sql engine (PostgreSQL, MySQL/MariaDB): the engine decides, the adapter
 * (rwlock-adapter.ts) stores, in a rwlocks table and an entries table beside the lock table.
 *
 * - Acquire: ONE transaction that locks the name's rwlocks row (made when missing), deletes the entries that
 *   ended on the server's clock, reads the rest (locking), and grants a reader when no writer is ahead of its
 *   place (held or waiting), a writer when nobody is ahead, else keeps the caller's place for max(ttl, 3 s).
 *   A newcomer's place is behind every entry there, so nobody barges, and a queued writer holds back every
 *   reader behind it (no writer starvation). There is no upgrade.
 * - Fences: a writer takes a new value of the store-wide source above every fence and place read under the
 *   lock; a reader shares the read epoch while no writer was granted since it began (the row's epoch equals
 *   its latest), else starts a new epoch the same way. The source outlives the rows, so fences never go back.
 * - Downgrade: ONE statement on the writer's own entry, owner and fence checked: its mode becomes `read`,
 *   its place, fence and lease stay; waiters wake.
 * - Renewal: ONE statement on the entry, owner and fence checked. Release and abandon: a transaction that
 *   locks the row, deletes the entry (abandon: whatever the acquire's owner holds or where it waits), deletes
 *   the rwlocks row when no entry is left, and wakes waiters. Abandon runs for every acquire that sent a
 *   transaction, whatever came back (a lost reply to its COMMIT may hide a grant).
 * - Expiry on the server's clock only: the purge compares with it; the engine never reads a timestamp.
 * - Waiting: as the semaphore's (semaphore.ts): notifications where the adapter has them, else polling; a
 *   refusal answered after news of the name arrived asks again at once (the news may be newer).
 * - Housekeeping: after a grant, paced per client, one transaction deletes idle names whose entries all
 *   ended (crashed holders' and waiters').
 *
 * Statements, without faults: acquire 1 transaction of 4-7, renewal 1, downgrade 1, release 1 transaction of 4.
 */
import { raceSignal } from '../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  DoctorFinding,
  HeldLease,
  LockInfo,
  RwLockFacet,
  RwLockInfo,
} from '../../core/backend.js'
import { placeKeptMs } from '../../core/backend.js'
import type { SqlLeaseOptions } from './engine.js'
import { LineTables, RETIRE_BATCH } from './line-tables.js'
import type { SqlRwEntry, SqlRwLockAdapter, SqlRwLockRow, SqlRwLockTx } from './rwlock-adapter.js'
import type { SqlWaiting } from './wait.js'

/** The rwlock facet over `adapter`'s tables, and what its close must end (the subscription). */
export function sqlRwLock(
  adapter: SqlRwLockAdapter,
  options: SqlLeaseOptions = {},
): {
  readonly facet: RwLockFacet
  doctor(signal: AbortSignal): Promise<DoctorFinding[]>
  close(): Promise<void>
} {
  const engine = new SqlRwLock(adapter, options)
  const facet: RwLockFacet = {
    id: options.id ?? adapter.id,
    capabilities: { expiry: 'server-ttl', notify: engine.waiting.notifies, fifo: true },
    limits: adapter.limits,
    tryAcquire: (req, signal) => engine.attempt(req, signal),
    extend: (lease, ttlMs, signal) => engine.extend(lease, ttlMs, signal),
    release: (lease) => engine.release(lease),
    abandon: (req) => engine.abandon(req),
    downgrade: (lease, signal) => engine.downgrade(lease, signal),
    inspect: (key, signal) => engine.inspect(key, signal),
    holders: (key, signal) => engine.holders(key, signal),
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
  | { readonly fence: bigint; readonly leaseMs: number }
  | { readonly queued: true; readonly soonestMs: number | undefined }

export class SqlRwLock {
  readonly #adapter: SqlRwLockAdapter
  readonly #id: string
  readonly #line: LineTables

  constructor(adapter: SqlRwLockAdapter, options: SqlLeaseOptions = {}) {
    this.#adapter = adapter
    this.#id = options.id ?? adapter.id
    this.#line = new LineTables(adapter, options, 'read-write lock')
  }

  get waiting(): SqlWaiting {
    return this.#line.waiting
  }

  /** One attempt (`RwLockFacet.tryAcquire`): granted, or queued in its place. */
  async attempt(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const mode = req.rwlock?.mode
    if (!mode) throw new TypeError('A read-write lock acquire carries `rwlock` (its mode)')
    await this.#line.tables.ready(signal)
    const { key, owner, ttlMs, holder } = req
    // Before it is sent: from here on it may commit whatever we hear (abandon must undo it).
    this.#line.sent.set(owner, true)
    // What this process had heard of the name: news arriving while the transaction runs (a release
    // notified before this waiter listens again) must not be missed.
    const heard = this.waiting.mark(key)
    let out: Attempt
    try {
      // Not raced against the signal: an abandon after it must run after it on the server.
      out = await this.#adapter.transaction('acquire', key, async (tx): Promise<Attempt> => {
        const row = (await tx.lock(key, true))!
        await tx.purge(key)
        const entries = await tx.entries(key, true)
        const mine = entries.find((entry) => entry.owner === owner)
        // An earlier attempt of this acquire was granted (its reply lost): that grant, as it stands.
        if (mine?.fence !== undefined) return { fence: mine.fence, leaseMs: mine.remainingMs }
        let after = row.latest
        for (const entry of entries) {
          if (entry.place > after) after = entry.place
          if (entry.fence !== undefined && entry.fence > after) after = entry.fence
        }
        const others = entries.filter((entry) => entry.owner !== owner)
        const ahead = mine === undefined ? others : others.filter((entry) => entry.place < mine.place)
        const admitted =
          mode === 'write'
            ? ahead.length === 0 && others.every((entry) => entry.fence === undefined)
            : ahead.every((entry) => entry.mode === 'read') &&
              others.every((entry) => entry.mode === 'read' || entry.fence === undefined)
        const write = { key, owner, mode, holder }
        if (admitted) {
          const fence = await this.#fence(tx, key, row, mode, after)
          const place = mine?.place ?? (fence > after ? fence : await tx.next(after))
          await tx.put({ ...write, place, fence, ms: ttlMs })
          // A reader behind this one may be admitted beside it: let it ask.
          if (others.some((entry) => entry.fence === undefined)) await tx.notify(key)
          return { fence, leaseMs: ttlMs }
        }
        const place = mine?.place ?? (await tx.next(after))
        await tx.put({ ...write, place, fence: undefined, ms: placeKeptMs(ttlMs) })
        const soonest = Math.min(...ahead.filter(granted).map((entry) => entry.remainingMs))
        return { queued: true, soonestMs: Number.isFinite(soonest) ? Math.max(0, soonest) : undefined }
      })
    } catch (error) {
      // The tables may be gone (an operator dropped them): the next attempt checks them again.
      this.#line.tables.forget()
      throw error
    }
    if ('fence' in out) {
      this.#retire()
      return { granted: true, fence: out.fence, ttlMs: Math.min(ttlMs, out.leaseMs) }
    }
    // News of the name since the transaction began: its answer may be older than that news; ask again.
    if (this.waiting.mark(key) !== heard) return { granted: false, queued: true, retryInMs: 0 }
    return {
      granted: false,
      queued: true,
      ...(out.soonestMs === undefined ? {} : { retryInMs: out.soonestMs + 1 }),
    }
  }

  /** `extend`: the entry's lease restarted, if it is still there; an unknown outcome settled by a read. */
  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal) {
    try {
      const renewed = await this.#adapter.extend(lease.key, lease.owner, lease.fence, ttlMs, signal)
      return renewed ? ({ renewed: true, ttlMs } as const) : ({ renewed: false } as const)
    } catch (error) {
      if (!(await this.#stillOurs(lease, error))) return { renewed: false } as const
      throw error
    }
  }

  /** `downgrade`: the writer's entry made a reader in place; an unknown outcome is the caller's to retry. */
  async downgrade(lease: HeldLease, signal: AbortSignal) {
    const done = await this.#adapter.downgrade(lease.key, lease.owner, lease.fence, signal)
    return done ? ({ downgraded: true } as const) : ({ downgraded: false } as const)
  }

  /** `release`: deletes the entry (owner and fence checked); false when it was gone. */
  async release(lease: HeldLease): Promise<boolean> {
    try {
      return await this.#remove(lease.key, lease.owner, lease.fence, 'release')
    } catch (error) {
      // Gone: our release ran (or the lease had ended and was purged); there: once more.
      if (!(await this.#stillOurs(lease, error))) return true
      return await this.#remove(lease.key, lease.owner, lease.fence, 'release')
    }
  }

  /**
   * `abandon`: whatever the acquire's owner holds or where it waits, owner-checked; nothing when it never
   * sent a transaction. Not gated on the table check, which a failed attempt resets although its
   * transaction may have committed.
   */
  async abandon(req: AcquireRequest): Promise<void> {
    if (!this.#line.sent.has(req.owner)) return
    await this.#remove(req.key, req.owner, undefined, 'give up the acquire of')
    this.#line.sent.delete(req.owner)
  }

  async inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    const view = await this.#read(key, signal)
    const latest = view?.row.latest || (await this.#adapter.latestFence?.(signal))
    if (latest === undefined || latest === 0n) return view === undefined ? null : { held: false }
    return { held: (view?.grants.length ?? 0) > 0, fence: latest }
  }

  async holders(key: string, signal: AbortSignal): Promise<RwLockInfo | null> {
    const view = await this.#read(key, signal)
    if (view === undefined) return null
    return {
      holders: view.grants.map((entry) => ({
        owner: entry.owner,
        mode: entry.mode,
        ...(entry.holder === undefined ? {} : { holder: entry.holder }),
        fence: entry.fence,
        expiresInMs: Math.floor(entry.remainingMs),
      })),
      waiting: view.waiting,
      ...(view.row.latest > 0n ? { fence: view.row.latest } : {}),
    }
  }

  doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    return this.#line.doctor(signal)
  }

  close(): Promise<void> {
    return this.#line.close()
  }

  /**
   * The fence of a grant of `mode` now, stored as the row's latest (and epoch): a reader shares the read
   * epoch while no writer was granted since it began; anything else takes a new value above `after`.
   */
  async #fence(
    tx: SqlRwLockTx,
    key: string,
    row: SqlRwLockRow,
    mode: 'read' | 'write',
    after: bigint,
  ): Promise<bigint> {
    if (mode === 'read' && row.epoch > 0n && row.epoch === row.latest) return row.epoch
    const fence = await tx.next(after)
    await tx.record(key, { latest: fence, epoch: mode === 'read' ? fence : row.epoch })
    return fence
  }

  /** Deletes `owner`'s entry (or, `fence` undefined, any entry of it), forgets an idle name, wakes. */
  #remove(key: string, owner: string, fence: bigint | undefined, what: string): Promise<boolean> {
    return this.#adapter.transaction(what, key, async (tx) => {
      await tx.lock(key, false)
      const removed = await tx.remove(key, owner, fence)
      if (!removed) return false
      await tx.forgetIfIdle(key)
      await tx.notify(key)
      return true
    })
  }

  /** Whether `lease`'s entry is still there, after a statement whose outcome is unknown (else its error). */
  async #stillOurs(lease: HeldLease, error: unknown): Promise<boolean> {
    let entries: SqlRwEntry[]
    try {
      entries = await this.#adapter.transaction('read', lease.key, (tx) => tx.entries(lease.key, false))
    } catch {
      throw error
    }
    return entries.some((entry) => entry.owner === lease.owner && entry.fence === lease.fence)
  }

  /** The lock as the store keeps it now: its row, its valid grants, how many places are kept. */
  async #read(key: string, signal: AbortSignal) {
    if (!(await this.#line.tables.there(signal))) return undefined
    const read = this.#adapter.transaction('read', key, async (tx) => {
      const row = await tx.peek(key)
      return row === undefined ? undefined : { row, entries: await tx.entries(key, false) }
    })
    const got = await raceSignal(read, signal)
    if (got === undefined) return undefined
    const live = got.entries.filter((entry) => entry.remainingMs > 0).sort(byPlace)
    return { row: got.row, grants: live.filter(granted), waiting: live.filter((e) => !granted(e)).length }
  }

  /** Deletes idle names whose entries all ended, in the background of a grant. */
  #retire(): void {
    this.#line.retire(() =>
      this.#adapter.transaction('retire idle read-write locks', undefined, async (tx) => {
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

function granted(entry: SqlRwEntry): boolean {
  return entry.fence !== undefined
}

function byPlace(a: SqlRwEntry, b: SqlRwEntry): number {
  return a.place < b.place ? -1 : a.place > b.place ? 1 : 0
}
