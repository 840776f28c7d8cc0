/**
 * The sql-lease engine: a lock as ONE lease row per key in a SQL table, each primitive ONE statement
 * evaluated on the database server's clock (PostgreSQL `clock_timestamp()`, MySQL/MariaDB `SYSDATE(6)`).
 * The row model of ShedLock and madelson's DistributedLock lease tables, with a fence added that outlives
 * the row.
 *
 * - Grant (one statement): no row → insert (a fence above every fence the key's deleted rows had: the
 *   adapter's fence source); a free row (its lease ended on the server's clock,
 *   or released) → taken, fence + 1; a row held by this same owner (an earlier attempt of this acquire
 *   whose reply was lost) → its lease restarted, fence kept; held by another → nothing written, and the
 *   statement says how long the holder's lease has left, which paces our next look (wait.ts).
 * - Expiry: the server's clock alone decides, in the statement that takes over, so no waiter needs to
 *   observe a row for a lease (cas-lease's rule) and client clocks never matter. A holder counts its
 *   validity from before the statement was sent, on its own monotonic clock, plus the lease the server
 *   reports having set (a duration; never the server's timestamps): the server started that lease after
 *   our send, so it ends after our validity does (the core subtracts the drift allowance too).
 * - Fence: a bigint column advanced by the granting statement, kept by renewals and releases, and lifted
 *   to a source that outlives the row (PostgreSQL: a sequence seeded past the server's clock; MySQL and
 *   MariaDB: the server's clock in µs), so it never goes back when an operator deletes rows, truncates
 *   or remakes the table (a durable database keeps it across restarts), nor when a name is retired.
 * - Retire: storage follows the locks held or recently held, not the names ever used. A release frees
 *   the row (PostgreSQL deletes it; MySQL/MariaDB marks it, and retires it once its fences are safe to
 *   forget), and after a grant, at most once per `RETIRE_EVERY_MS` per client (sooner while a backlog
 *   is left), one bounded statement deletes rows whose lease ended over `RETIRE_AFTER_MS` ago (a crashed
 *   holder's). A holder that renews a retired row finds it gone: lost, which its lease already was.
 * - Renewal and release: one statement each, conditioned on our owner and fence. An uncertain outcome
 *   (the connection dropped after sending) is settled by re-reading the row: not ours any more means lost
 *   (extend) or nothing to release; ours means the statement is repeated (both are idempotent) or the
 *   outcome is reported unknown to the core, which retries.
 * - Atomic sets (`attemptAll`, where the adapter has `acquireAll`): the grant statement of every key in
 *   ONE transaction, in sorted key order, committed only when all were granted; each key is then a lease
 *   row like any other. A transaction that lost to another (deadlock, serialization failure) is a refusal.
 * - Abandon: an acquire that gave up after a statement that may have granted (one that threw, or any
 *   grant) releases whatever its owner holds, owner-checked. A statement still running on the server
 *   after that (a dropped connection the server has not noticed yet) can leave a lease nobody renews: it
 *   ends after its ttl.
 * - Waiting (wait.ts): the adapter's notifications (PostgreSQL LISTEN/NOTIFY on one connection per
 *   client) or doorbell (MySQL) wake one waiter of the key per client at each release, at once; without
 *   them, and always as a fallback, a waiter asks at most once a second, and no later than the holder's
 *   remaining lease.
 * - The table is created on first use (once per client) unless `createTable` is off: then a missing table
 *   is an error naming it and giving the DDL.
 *
 * - List: the held rows under a prefix, a page of `listPageSize` (100) per statement, by keyset (the
 *   last key of a page starts the next): read only, never the whole table in one reply.
 * - Break (an operator's): read the row, then ONE statement that frees it as a release does only while
 *   the lease read (its owner and fence) still holds it: a lease granted since is never touched, the next
 *   grant's fence is greater (as after a release), and waiters are woken as by a release. The holder's
 *   next renewal, conditioned on its owner and fence and not released, finds it gone.
 *
 * Statements, without faults: acquire 1 (+1 once per client: the table check; + retiring, about 1 per
 * `RETIRE_EVERY_MS` per client, in the background), renewal 1, release 1,
 * abandon 0 or 1, inspect 1, list 1 per page, break 2; waiting ≤ 1 per second per waiting key per process,
 * and 1 per release per process whose client waits on the key, however many of its acquires wait.
 *
 * Adapter: `SqlAdapter` (adapter.ts). Used by: PostgreSQL (src/backends/postgres), MySQL/MariaDB.
 */

import type {
  AcquireRequest,
  AllAttemptResult,
  AttemptResult,
  BreakOptions,
  BreakResult,
  DoctorFinding,
  ExtendResult,
  HeldLease,
  LeaseFacet,
  ListedLock,
  LockInfo,
} from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { BackendUnavailableError, type Primitive } from '../../core/errors.js'
import { retryRounds } from '../../core/retry.js'
import type { SqlAcquiredAll, SqlAdapter, SqlRow } from './adapter.js'
import { RetirePacer } from './retire-pacer.js'
import { TableCheck } from './table-check.js'
import { SqlWaiting } from './wait.js'

export type {
  SqlAcquired,
  SqlAcquiredAll,
  SqlAcquireRequest,
  SqlAdapter,
  SqlListedRow,
  SqlListener,
  SqlRow,
} from './adapter.js'

export interface SqlLeaseOptions {
  /** The backend's id in errors and diagnostics. @default the adapter's id */
  readonly id?: string | undefined
  /** Create the table on first use when it does not exist. @default true */
  readonly createTable?: boolean | undefined
  /** The longest time between two statements of a waiter whose key stays held. @default 1000 */
  readonly pollMaxMs?: number | undefined
  /** How long a new subscription may take to prove that notifications arrive. @default 5000 */
  readonly listenTimeoutMs?: number | undefined
  /** How many held rows one statement of `list` reads. @default 100 */
  readonly listPageSize?: number | undefined
}

const POLL_MAX_MS = 1000
const LISTEN_TIMEOUT_MS = 5000
/** Owners remembered as possibly holding (for abandon); forgetting one costs a statement, never safety. */
const OWNERS_KEPT = 10_000
const LIST_PAGE_SIZE = 100
/** Rounds of `breakLock`: each one lost only to a grant, renewal or release that landed in between. */
const BREAK_ROUNDS = 10
/**
 * Retiring: how long after its lease ended a row may go (a holder late by less renews it as before), how
 * often a client retires, how many rows per statement, and how long that statement may take.
 */
const RETIRE_AFTER_MS = 60_000
const RETIRE_EVERY_MS = 10_000
const RETIRE_BATCH = 500
const RETIRE_STATEMENT_MS = 10_000

/** The leased methods of `engine` over `adapter`'s table: the mutex's, or an election's (election.ts). */
export function sqlLeaseFacet(engine: SqlLease, adapter: SqlAdapter, id: string): LeaseFacet {
  const facet: LeaseFacet = {
    id,
    capabilities: { expiry: 'server-ttl', notify: engine.waiting.notifies, fifo: false },
    limits: adapter.limits,
    tryAcquire: (req, signal) => engine.attempt(req, signal),
    extend: (lease, ttlMs, signal) => engine.extend(lease, ttlMs, signal),
    release: (lease, signal) => engine.release(lease, signal),
    inspect: (key, signal) => engine.inspect(key, signal),
    abandon: (req, signal) => engine.abandon(req, signal),
  }
  if (!engine.waiting.notifies) return facet
  return {
    ...facet,
    waitForChange: (req, signal) => engine.waiting.waitForChange(req.key, req.owner, signal),
  }
}

export class SqlLease {
  readonly #adapter: SqlAdapter
  readonly #createTable: boolean
  readonly #listPageSize: number
  /** What the table is called in messages: "the lock table", or an election's "the elections table". */
  readonly #tableNoun: string
  readonly waiting: SqlWaiting
  /** The table check of this client: made once, before the first statement (again after a failure). */
  readonly #table: TableCheck
  /**
   * Owners whose acquire sent a statement that may have left the row theirs (abandon), with how many
   * statements it sent since it was last known to hold nothing.
   */
  readonly #mayHold = new BoundedMap<string, number>(OWNERS_KEPT)
  /** Owners whose acquire has been refused once: their next attempts may be paced. */
  readonly #waitingOwners = new BoundedMap<string, true>(OWNERS_KEPT)
  /** When this client last retired rows (monotonic ms), and whether a retire statement is running. */
  readonly #retirePacer = new RetirePacer(RETIRE_EVERY_MS, RETIRE_BATCH, RETIRE_STATEMENT_MS)

  /** `primitive`: what the table's rows are leases of (election.ts makes the elections' engine). */
  constructor(adapter: SqlAdapter, options: SqlLeaseOptions = {}, primitive: Primitive = 'lock') {
    this.#adapter = adapter
    this.#tableNoun = primitive === 'election' ? 'elections table' : 'lock table'
    this.#createTable = options.createTable ?? true
    this.#table = new TableCheck(adapter, this.#createTable, { noun: this.#tableNoun, plural: false })
    this.#listPageSize = options.listPageSize ?? LIST_PAGE_SIZE
    for (const name of ['pollMaxMs', 'listenTimeoutMs', 'listPageSize'] as const) {
      const value = options[name]
      if (value !== undefined && !(value > 0)) {
        throw new TypeError(`Expected \`${name}\` to be a number > 0, got ${String(value)}`)
      }
    }
    this.waiting = new SqlWaiting(
      adapter,
      options.pollMaxMs ?? POLL_MAX_MS,
      options.listenTimeoutMs ?? LISTEN_TIMEOUT_MS,
    )
  }

  /** One attempt (`LockBackend.tryAcquire`). Never waits for the holder. */
  async attempt(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    // Seen held by another a moment ago, too recently to ask again: the same answer, free. Only for an
    // acquire already waiting: a new one (a tryAcquire just after a release elsewhere) asks.
    if (this.#waitingOwners.has(req.owner)) {
      const paced = this.waiting.paced(req.key, req.owner)
      if (paced) return paced
    }
    const ready = this.#table.ready(signal)
    if (ready) await ready
    // Before it is sent: from here on it may be applied whatever we hear (abandon must release it).
    const sent = (this.#mayHold.get(req.owner) ?? 0) + 1
    this.#mayHold.set(req.owner, sent)
    const mark = this.waiting.mark(req.key)
    let out: Awaited<ReturnType<SqlAdapter['acquire']>>
    try {
      out = await this.#adapter.acquire(req, signal)
    } catch (error) {
      // The table may be gone (an operator dropped it): the next attempt checks it again, and makes it.
      this.#table.forget()
      throw error
    }
    if (out.granted) {
      this.#waitingOwners.delete(req.owner)
      this.#retire()
      // The lease the server set (never longer than asked): the core counts it from before the send.
      const ttlMs = Math.min(req.ttlMs, out.leaseMs)
      this.waiting.granted(req.key, req.owner, ttlMs)
      return { granted: true, fence: out.fence, ttlMs }
    }
    // A definite refusal: this statement left nothing of ours. Only when it was the acquire's one statement
    // does that clear the owner: an earlier uncertain one, or a later one sent while this reply was on its
    // way (the core gave up on this attempt and tried again), may have been granted.
    if (sent === 1 && this.#mayHold.get(req.owner) === 1) this.#mayHold.delete(req.owner)
    this.#waitingOwners.set(req.owner, true)
    return this.waiting.busy(
      req.key,
      req.owner,
      out.current ?? (out.remainingMs === undefined ? undefined : { remainingMs: out.remainingMs }),
      mark,
    )
  }

  /**
   * One atomic attempt over a set (`MultiKeyFacet.tryAcquireAll`; the adapter's `acquireAll`, one
   * transaction): every key granted as `attempt` grants one, or Busy with nothing taken. The owner is
   * marked as possibly holding before the transaction is sent, as `attempt` does, so the core's clean-up
   * of every key (`abandon`) undoes a commit whose reply was lost.
   */
  async attemptAll(reqs: readonly AcquireRequest[], signal: AbortSignal): Promise<AllAttemptResult> {
    const owner = reqs[0]!.owner
    const ready = this.#table.ready(signal)
    if (ready) await ready
    const sent = (this.#mayHold.get(owner) ?? 0) + 1
    this.#mayHold.set(owner, sent)
    const marks = reqs.map((req) => this.waiting.mark(req.key))
    let out: SqlAcquiredAll
    try {
      out = await this.#adapter.acquireAll!(reqs, signal)
    } catch (error) {
      this.#table.forget()
      throw error
    }
    if (out.granted) {
      this.#retire()
      const grants = out.grants.map((grant, i) => {
        const ttlMs = Math.min(reqs[i]!.ttlMs, grant.leaseMs)
        this.waiting.granted(reqs[i]!.key, owner, ttlMs)
        return { granted: true as const, fence: grant.fence, ttlMs }
      })
      return { granted: true, grants }
    }
    // Rolled back: as `attempt`'s definite refusal, this transaction left nothing of ours.
    if (sent === 1 && this.#mayHold.get(owner) === 1) this.#mayHold.delete(owner)
    const at = reqs.findIndex((req) => req.key === out.key)
    if (at < 0) return { granted: false }
    const seen = out.remainingMs === undefined ? undefined : { remainingMs: out.remainingMs }
    return this.waiting.busy(reqs[at]!.key, owner, seen, marks[at]!)
  }

  /** `LockBackend.extend`: our lease restarted from the server's now, if the row is still ours. */
  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    try {
      const set = await this.#adapter.extend(lease.key, lease.owner, lease.fence, ttlMs, signal)
      if (set === undefined) return { renewed: false }
      return { renewed: true, ttlMs: Math.min(ttlMs, set) }
    } catch (error) {
      // Unknown whether it ran. Not ours any more: lost for sure, whatever it did (it is conditioned
      // on our owner, so it cannot have touched another's lease). Still ours: unknown, the core retries.
      if (!ours(await this.#reread(lease.key, error, signal), lease)) return { renewed: false }
      throw error
    }
  }

  /** `LockBackend.release`: marks our row released (fence kept); false when it was no longer ours. */
  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    try {
      return await this.#adapter.release(lease.key, lease.owner, lease.fence, signal)
    } catch (error) {
      const row = await this.#reread(lease.key, error, signal)
      // Still held by us: it did not run; once more (owner-checked, so repeating it is harmless).
      if (ours(row, lease)) return await this.#adapter.release(lease.key, lease.owner, lease.fence, signal)
      // Gone: our release deleted it (or it was retired after our lease ended). Released by us (it ran),
      // or taken over after our lease ended (nothing of ours to release).
      if (row === undefined) return true
      return row.owner === lease.owner && row.fence === lease.fence && row.released
    }
  }

  /**
   * `LockBackend.abandon`: the acquire is over; a statement of it that may have granted is undone,
   * owner-checked. An owner whose statements were all refused left nothing: no statement.
   */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    this.#waitingOwners.delete(req.owner)
    // A wake-up it was given and did not use goes to the next waiter of the key in this process.
    this.waiting.left(req.key, req.owner)
    if (!this.#mayHold.has(req.owner)) return
    await this.#adapter.release(req.key, req.owner, undefined, signal)
    this.#mayHold.delete(req.owner)
  }

  /** `LockBackend.inspect`: the row as the server sees it now. */
  async inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    if (!(await this.#table.there(signal))) return null
    const row = await this.#adapter.read(key, signal)
    if (row === undefined) {
      // Free; a retired name's fences are below the table's latest one, which a resource may have seen.
      const fence = await this.#adapter.latestFence?.(signal)
      return fence === undefined ? null : { held: false, fence }
    }
    if (row.remainingMs <= 0) return { held: false, fence: row.fence }
    return heldView(row)
  }

  /** `LockBackend.list`: the held rows under `prefix`, a page per statement, each page after the last. */
  async *list(prefix: string, signal: AbortSignal): AsyncIterable<ListedLock> {
    if (!(await this.#table.there(signal))) return
    let after: string | undefined
    let page: readonly { readonly key: string }[]
    do {
      const rows = await this.#adapter.listHeld(prefix, after, this.#listPageSize, signal)
      for (const row of rows) yield { key: row.key, ...heldView(row) }
      page = rows
      after = rows.at(-1)?.key
    } while (page.length >= this.#listPageSize)
  }

  /**
   * `LockBackend.breakLock`: reads the row, then ends exactly the lease it read (its owner and fence, still
   * held); a round that lost to a grant, renewal or release in between reads again.
   */
  async breakLock(key: string, options: BreakOptions = {}): Promise<BreakResult> {
    const signal = options.signal ?? new AbortController().signal
    if (!(await this.#table.there(signal))) return { broken: false }
    // The grant the first round read: a later round ends only it, never a waiter's grant that followed it.
    let aimed = options.fence
    return retryRounds(
      BREAK_ROUNDS,
      async () => {
        const row = await this.#adapter.read(key, signal)
        if (row === undefined || row.released || row.remainingMs <= 0) return { broken: false }
        const lease = { owner: row.owner, fence: row.fence, holder: row.holder }
        if (aimed !== undefined && aimed !== row.fence) return { broken: false, lease }
        aimed = row.fence
        if (await this.#adapter.breakLease(key, row.owner, row.fence, signal)) return { broken: true, lease }
        return undefined
      },
      () =>
        new BackendUnavailableError(
          `Could not break lock "${key}" on ${this.#adapter.id}: it changed hands ${BREAK_ROUNDS} times while ` +
            'being broken. Try again, or look at who takes it (fencelock list)',
          { key, backend: this.#adapter.id, retryable: true },
        ),
    )
  }

  /** `LockBackend.doctor`: the server's findings, the table's, and whether notifications arrive. */
  async doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    const findings = [...((await this.#adapter.doctor?.(signal)) ?? [])]
    const table = await this.tableDoctor(signal)
    findings.push(...table.findings)
    if (table.exists) findings.push(...(await this.waiting.doctor()))
    return findings
  }

  /**
   * The table's part of `doctor` (an election's is added to the backend's: election.ts): present with the
   * adapter's findings on it, or missing with its DDL (fine until the first use makes it, unless
   * createTable is off).
   */
  async tableDoctor(signal: AbortSignal): Promise<{ exists: boolean; findings: DoctorFinding[] }> {
    const { table } = this.#adapter
    const noun = this.#tableNoun
    if (!(await this.#adapter.tableExists(signal))) {
      const first = noun === 'lock table' ? 'the first lock' : 'the first campaign'
      return {
        exists: false,
        findings: [
          {
            level: this.#createTable ? 'info' : 'error',
            message: this.#createTable
              ? `the ${noun} ${table} does not exist yet; ${first} creates it with:\n${this.#adapter.ddl()}`
              : `the ${noun} ${table} does not exist and createTable is off; create it with:\n${this.#adapter.ddl()}`,
          },
        ],
      }
    }
    const findings: DoctorFinding[] = [{ level: 'ok', message: `the ${noun} ${table} exists` }]
    findings.push(...((await this.#adapter.tableDoctor?.(signal)) ?? []))
    return { exists: true, findings }
  }

  async close(): Promise<void> {
    try {
      await this.waiting.close()
    } finally {
      await this.#adapter.close()
    }
  }

  /** Deletes rows whose lease ended long ago, in the background of a grant (retire-pacer.ts: how often). */
  #retire(): void {
    const adapter = this.#adapter
    if (adapter.retire === undefined) return
    this.#retirePacer.retire((signal) => adapter.retire!(RETIRE_AFTER_MS, RETIRE_BATCH, signal))
  }

  /** The row after a statement whose outcome is unknown; when it cannot be read, that statement's error. */
  async #reread(key: string, error: unknown, signal: AbortSignal): Promise<SqlRow | undefined> {
    try {
      return await this.#adapter.read(key, signal)
    } catch {
      throw error
    }
  }
}

/** `inspect`'s view of a held row. */
function heldView(row: SqlRow): LockInfo {
  const view = {
    held: true,
    owner: row.owner,
    holder: row.holder,
    fence: row.fence,
    expiresInMs: row.remainingMs,
  }
  return row.value === undefined ? view : { ...view, value: row.value }
}

/** Whether `row` is still held by `lease` (its owner and fence, not released). */
function ours(row: SqlRow | undefined, lease: HeldLease): boolean {
  return row !== undefined && row.owner === lease.owner && row.fence === lease.fence && !row.released
}
