/**
 * The adapter interface of the `sql-lease` engine: what a SQL database gives the engine for one lease row
 * per lock. The engine owns the algorithm around the statements (validity, settling uncertain outcomes by
 * re-reading the owner, pacing polls, waking waiters, creating the table on first use); an adapter owns the
 * SQL, its client and its error mapping, nothing of the algorithm.
 *
 * The row of a lock (names are the adapter's; the semantics are fixed here):
 * - the lock's key (primary key), `owner` (the acquire's 128-bit id), `fence` (bigint), the lease's end on
 *   the SERVER's clock (`expires_at`), and the `holder` text (diagnostics only).
 * - Free = the lease has ended on the server's clock, or the row was released. A release makes the row
 *   free at once whatever the server's clock does next (e.g. `expires_at` set far in the past, never to
 *   "now", which a clock stepped back would turn into a held row again).
 * - Rows are retired: a release may delete the row (or mark it released, when the adapter's fence source
 *   needs the row kept a while), and `retire` deletes rows whose lease ended long ago (crashed holders),
 *   so the table holds the locks held or recently held, not every name ever used. A name's next row
 *   takes its fence from the adapter's source that outlives rows, so a fence never goes back. A missing
 *   row is a free lock: a renewal finds it not ours (lost, which is right: its lease had ended).
 *
 * Every primitive is ONE statement, evaluated on the server's clock at the moment it runs
 * (`clock_timestamp()` on PostgreSQL, `SYSDATE(6)` on MySQL/MariaDB: never `now()`/`NOW()`, which are frozen
 * per transaction / statement), so client clocks never matter. The lease lengths an adapter returns are
 * durations the server measured, never timestamps: the engine counts validity from before the statement
 * was sent on its own monotonic clock, plus the lease the statement granted.
 */
import type { BackendLimits, DoctorFinding } from '../../core/backend.js'

/** The lease row of a lock as the server sees it now. */
export interface SqlRow {
  readonly owner: string
  readonly fence: bigint
  /** The lease left on the server's clock, in ms; <= 0 when free (expired or released). */
  readonly remainingMs: number
  /** Released by its owner (as opposed to expired); diagnostics only. */
  readonly released: boolean
  readonly holder?: string | undefined
  /** The leader's value, on an elections table (sql-election.ts); absent on a lock table. */
  readonly value?: string | undefined
}

/** A held row as `listHeld` finds it. */
export interface SqlListedRow extends SqlRow {
  readonly key: string
}

/** One attempt to take a lock. */
export interface SqlAcquireRequest {
  readonly key: string
  readonly owner: string
  readonly ttlMs: number
  readonly holder?: string | undefined
  /** The candidate's value, stored with the grant on an elections table. */
  readonly value?: string | undefined
}

/**
 * The outcome of the acquire statement:
 * - no row: inserted, with a fence above every earlier one of the key (the adapter's fence source);
 * - a free row (expired or released): taken over, fence + 1;
 * - a row held (unexpired, unreleased) by this same owner (an earlier attempt of this acquire whose reply
 *   was lost): its lease restarted from now, fence kept;
 * - a row held by another owner: nothing written.
 */
export type SqlAcquired =
  /** Granted: the fence the row now carries and the lease the statement set, in ms (server-measured). */
  | { readonly granted: true; readonly fence: bigint; readonly leaseMs: number }
  /**
   * Held by another: the row as the statement saw it when the adapter can return it in the same statement
   * (saves the engine a read; the engine uses `remainingMs` to pace its next attempt). `undefined` when
   * the statement could not tell (PostgreSQL: a row inserted by a concurrent transaction after the
   * statement's snapshot); the engine then retries soon.
   */
  | {
      readonly granted: false
      readonly current?: SqlRow | undefined
      /**
       * The holder's remaining lease (ms, server-measured) when the statement can tell that but not the
       * whole row (MySQL: one integer comes back, `LAST_INSERT_ID(expr)`); paces like `current`.
       */
      readonly remainingMs?: number | undefined
    }

/**
 * The outcome of `acquireAll`: every key granted (each as `acquire` grants it, in the order asked), or
 * nothing written. Refused, `key` names a key held by another and `remainingMs` its holder's lease left
 * (paces the next attempt); neither when the transaction lost to a concurrent one (a deadlock, a
 * serialization failure): the engine then retries soon.
 */
export type SqlAcquiredAll =
  | {
      readonly granted: true
      readonly grants: readonly { readonly fence: bigint; readonly leaseMs: number }[]
    }
  | { readonly granted: false; readonly key?: string | undefined; readonly remainingMs?: number | undefined }

export interface SqlAdapter {
  /** Names the store in errors and diagnostics (`postgres://user@host:5432/db`); never contains secrets. */
  readonly id: string
  /** Key and lease limits (the key column's size, the server's interval range). */
  readonly limits: BackendLimits
  /** The qualified table name as messages show it (`"public"."fencelock_locks"`). */
  readonly table: string

  /**
   * The acquire statement (see `SqlAcquired`). Settles only once the statement has (answered, or its
   * connection failed): do NOT reject early when `signal` aborts. The core stops waiting for the attempt
   * at once by itself, and then cleans up (`release` with no fence) after this promise settles: a
   * rejection on abort would let that clean-up run on the server BEFORE the grant it must undo, leaving
   * a lease nobody renews for a whole ttl (chaos scenario S15 showed it).
   */
  acquire(req: SqlAcquireRequest, signal: AbortSignal): Promise<SqlAcquired>
  /**
   * Atomic multi-key acquire: ONE transaction that runs `acquire`'s statement for each request in the
   * order given (sorted keys: every such transaction locks rows in one order) and commits only when every
   * key was granted; else it rolls back, writing nothing. Settles as `acquire` does (never early on abort);
   * a failure to commit or to hear the commit's reply throws, its outcome unknown. Omit where the store
   * cannot (the engine refuses atomic sets).
   */
  acquireAll?(reqs: readonly SqlAcquireRequest[], signal: AbortSignal): Promise<SqlAcquiredAll>
  /**
   * Restarts the lease of `key` at `ttlMs` from the server's now, only while the row is held by `owner`
   * with `fence` and not released (an expired row nobody took is still ours: nobody else was granted).
   * Returns the lease set (ms, server-measured), or `undefined` when the row is not ours.
   */
  extend(
    key: string,
    owner: string,
    fence: bigint,
    ttlMs: number,
    signal: AbortSignal,
  ): Promise<number | undefined>
  /**
   * Frees the row at once (deletes it, or marks it released) only while it is held by `owner` (any fence
   * when `fence` is undefined: abandon, whose fence is unknown); true when it was. An adapter with
   * notifications notifies waiters in the same statement (or transaction).
   */
  release(key: string, owner: string, fence: bigint | undefined, signal: AbortSignal): Promise<boolean>
  /**
   * A fence at least as large as every fence the table has granted (PostgreSQL: the sequence's last
   * value), or `undefined` when the adapter has none: what `inspect` shows of a name whose row is retired.
   */
  latestFence?(signal: AbortSignal): Promise<bigint | undefined>
  /** The row of `key`, or `undefined` when there is none (inspect; settling an uncertain outcome). */
  read(key: string, signal: AbortSignal): Promise<SqlRow | undefined>
  /**
   * One page of `list`: the rows held now on the server's clock (unreleased, unexpired) whose key starts
   * with `prefix`, and comes after `after` when given, in the keys' byte order (UTF-8, whatever the
   * column's collation: a prefix is a range of bytes), at most `limit` of them. Read only.
   */
  listHeld(
    prefix: string,
    after: string | undefined,
    limit: number,
    signal: AbortSignal,
  ): Promise<SqlListedRow[]>
  /**
   * An operator's break: frees the row as `release` does only while it is held (unreleased, unexpired)
   * by `owner` with `fence`; true when it was. Wakes waiters as `release` does (in the same statement
   * where the adapter can).
   */
  breakLease(key: string, owner: string, fence: bigint, signal: AbortSignal): Promise<boolean>
  /**
   * An elections table's (sql-election.ts): replaces the value of `key`'s row, only while it is held by
   * `owner` with `fence`, not released, and its lease has not ended on the server's clock; true when it
   * was. A dialect with notifications notifies the key in the same statement, for observers.
   */
  proclaim?(key: string, owner: string, fence: bigint, value: string, signal: AbortSignal): Promise<boolean>

  /**
   * Deletes up to `limit` rows whose lease ended (expired, or released) more than `endedMs` ago on the
   * server's clock (longer where the adapter's fences need it), never a row held or taken meanwhile;
   * returns how many. Housekeeping: the engine runs it now and then after a grant.
   */
  retire?(endedMs: number, limit: number, signal: AbortSignal): Promise<number>

  /** Whether the table exists (checked once per client, before the first statement). */
  tableExists(signal: AbortSignal): Promise<boolean>
  /** Creates the table (and what it needs); safe when another client creates it at the same time. */
  createTable(signal: AbortSignal): Promise<void>
  /** The DDL that creates the table, for errors, `doctor` and the docs. */
  ddl(): string

  /**
   * Notifications (PostgreSQL LISTEN/NOTIFY): subscribes once per client on a dedicated connection.
   * `onKey(key)` for every release of a key; `onGap()` whenever notifications may have been missed (the
   * listening connection was lost and subscribed again). Resolves only once a notification sent after
   * subscribing came back on the listening connection (behind a transaction-pooling proxy LISTEN may
   * "succeed" and never deliver); rejects when listening is impossible. The engine bounds the wait with
   * `signal` (on abort: stop listening and reject) and, when it fails, polls. Omit when the database has none.
   */
  listen?(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener>
  /**
   * A per-waiter wake-up hint for adapters without a notification stream (a doorbell): resolves when `key`
   * may have changed, or when `signal` aborts; may resolve spuriously, never rejects. The engine uses
   * `listen` when an adapter has both.
   */
  watch?(key: string, signal: AbortSignal): Promise<void>

  /** The server's findings for `fencelock doctor`: version, settings, replication (nothing of the table). */
  doctor?(signal: AbortSignal): Promise<DoctorFinding[]>
  /**
   * The table's findings for `fencelock doctor`, asked only once the engine found the table: its rows,
   * its shape, the privileges and fence source its statements need.
   */
  tableDoctor?(signal: AbortSignal): Promise<DoctorFinding[]>
  /** Closes only what the adapter itself opened (a client made from a URL, never the user's). */
  close(): Promise<void>
}

/** A running subscription of `SqlAdapter.listen`. */
export interface SqlListener {
  /** Stops listening (the dedicated connection is given back). */
  close(): Promise<void>
}
// Errors: "not ours" and "held by another" are results, never exceptions. Anything else (network, server
// restarting, a killed connection, a deadlock) throws `BackendUnavailableError` naming the key and the
// store, `retryable` unless waiting cannot help (authentication, a missing table with createTable off, a
// syntax error); the outcome of a statement that threw is unknown (it may have been applied).
