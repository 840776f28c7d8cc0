/**
 * The adapter interface of the sql engine's read-write lock (rwlock.ts decides; an adapter stores): two
 * tables beside the lock table, and the operations one transaction is made of.
 *
 * - The rwlocks table: one row per read-write lock in use (held or waited for): its name, the latest fence
 *   granted and the read epoch's fence. Idle, the row is deleted (bounded storage).
 * - The entries table: one row per (name, owner), a reader or a writer: its place in line (arrival order,
 *   kept from arrival to release), its fence once granted (none while it waits), its end on the SERVER's
 *   clock (the lease's once granted, the place's until then) and the holder's text.
 * - Places and fences come from a store-wide source that outlives rows (PostgreSQL: a sequence;
 *   MySQL/MariaDB: the server's clock in µs), lifted above `after` (the largest the engine read under the
 *   lock's row), so a name's fences never go back, also after its rows were deleted.
 *
 * Every transaction that changes a lock's entries locks its rwlocks row first (`lock`), so the transactions
 * of one name run one at a time; reads of entries inside it are locking reads.
 */
import type { BackendLimits, RwLockMode } from '../../core/backend.js'
import type { SqlListener } from './adapter.js'

/** A rwlocks row. */
export interface SqlRwLockRow {
  /** The latest fence granted while the row lived (0 when none). */
  readonly latest: bigint
  /** The read epoch's fence: current while it equals `latest` (no writer granted since); 0 when none. */
  readonly epoch: bigint
}

/** An entries row: a reader or a writer, granted or waiting. */
export interface SqlRwEntry {
  readonly owner: string
  readonly mode: RwLockMode
  /** Arrival order: smaller is ahead. */
  readonly place: bigint
  /** Set once granted. */
  readonly fence: bigint | undefined
  /** The lease (or the place) left on the server's clock, in ms; <= 0 when ended. */
  readonly remainingMs: number
  readonly holder?: string | undefined
}

/** What an entry is written with (inserted, or the owner's row replaced). */
export interface SqlRwWrite {
  readonly key: string
  readonly owner: string
  readonly mode: RwLockMode
  readonly place: bigint
  /** Granted with this fence; undefined: a place in line. */
  readonly fence: bigint | undefined
  /** The lease (grant) or how long the place is kept (line), from the server's now. */
  readonly ms: number
  readonly holder?: string | undefined
}

/** The operations of one transaction (`SqlRwLockAdapter.transaction`). */
export interface SqlRwLockTx {
  /**
   * Locks `key`'s rwlocks row for the transaction. With `create`, makes it first (latest and epoch 0) when
   * missing; without, `undefined` when missing.
   */
  lock(key: string, create: boolean): Promise<SqlRwLockRow | undefined>
  /** `key`'s rwlocks row without locking it (a read). */
  peek(key: string): Promise<SqlRwLockRow | undefined>
  /** Deletes `key`'s entries that ended on the server's clock. */
  purge(key: string): Promise<void>
  /** `key`'s entries; `lock`: a locking read (inside an acquire or a release). */
  entries(key: string, lock: boolean): Promise<SqlRwEntry[]>
  /** A new value of the store-wide source, above `after`: a place, or a fence. */
  next(after: bigint): Promise<bigint>
  /** Stores `key`'s latest fence and read epoch (under `lock`). */
  record(key: string, row: SqlRwLockRow): Promise<void>
  /** Writes `owner`'s entry as `write` says (its end `ms` from the server's now). */
  put(write: SqlRwWrite): Promise<void>
  /**
   * Deletes `owner`'s granted entry with `fence`, or (`fence` undefined: abandon) any entry of `owner`.
   * True when a row went.
   */
  remove(key: string, owner: string, fence: bigint | undefined): Promise<boolean>
  /** Deletes `key`'s rwlocks row when no entry of it is left (under `lock`). */
  forgetIfIdle(key: string): Promise<void>
  /** Wakes `key`'s waiters when the transaction commits (where the store notifies); else nothing. */
  notify(key: string): Promise<void>
  /** Up to `limit` names with no entry still running, locked, skipping those locked by others. */
  idle(limit: number): Promise<string[]>
}

export interface SqlRwLockAdapter {
  /** Names the store in errors and diagnostics; never contains secrets. */
  readonly id: string
  readonly limits: BackendLimits
  /** The rwlocks table and the entries table as messages show them. */
  readonly table: string
  /**
   * Runs `body` in ONE transaction (READ COMMITTED, read-write), committed when it resolves, rolled back
   * when it throws. Settles only once the server answered (do NOT reject early on abort). Failures are
   * `BackendUnavailableError`s naming `what`, `key` and the store.
   */
  transaction<T>(what: string, key: string | undefined, body: (tx: SqlRwLockTx) => Promise<T>): Promise<T>
  /**
   * ONE statement: restarts `owner`'s lease of `key` at `ttlMs` from the server's now, only while its
   * granted entry with `fence` is there and its lease has not ended on the server's clock (an ended lease
   * is never revived, as the mutex's extend: the name was free in between). True when it was.
   */
  extend(key: string, owner: string, fence: bigint, ttlMs: number, signal: AbortSignal): Promise<boolean>
  /**
   * ONE statement: makes `owner`'s granted entry with `fence` a reader, in place (its place, fence and
   * lease kept), and wakes the waiters where the store notifies. True when the entry is there (a reader
   * already counts: an earlier downgrade whose reply was lost).
   */
  downgrade(key: string, owner: string, fence: bigint, signal: AbortSignal): Promise<boolean>
  /** The latest value the store-wide source gave (inspect of a forgotten lock); undefined: none. */
  latestFence?(signal: AbortSignal): Promise<bigint | undefined>
  /** Whether both tables (and what they need) exist. */
  tableExists(signal: AbortSignal): Promise<boolean>
  /** Creates them; safe when another client creates them at the same time. */
  createTable(signal: AbortSignal): Promise<void>
  /** The DDL that creates them (errors, `doctor`, the docs). */
  ddl(): string
  /** Notifications of `notify` (PostgreSQL LISTEN): as `SqlAdapter.listen`. Omit when the store has none. */
  listen?(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener>
  /** Closes only what the adapter itself opened. */
  close(): Promise<void>
}
