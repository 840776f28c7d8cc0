/**
 * The adapter interface of the sql engine's counting semaphore (semaphore.ts decides; an adapter stores):
 * two tables beside the lock table, and the operations one transaction is made of.
 *
 * - The semaphores table: one row per semaphore in use (held or waited for): its name, its stored limit
 *   and the latest sequence granted. Idle, the row is deleted (bounded storage).
 * - The permits table: one row per (semaphore, owner): a grant (`granted`, its permits, its sequence, the
 *   lease's end on the SERVER's clock, the holder's text) or a place in line (its permits, its arrival
 *   order as `sequence`, and the time its place lapses, on the server's clock).
 * - Sequences come from a store-wide source that outlives rows (PostgreSQL: a sequence; MySQL/MariaDB: the
 *   server's clock in µs), lifted above `after` (the latest the engine read under the semaphore's lock),
 *   so a semaphore's sequences never go back, also after its rows were deleted.
 *
 * Every transaction that changes a semaphore's permits locks its semaphore row first (`lock`), so the
 * transactions of one semaphore run one at a time; reads of permits inside it are locking reads (the latest
 * committed rows, whatever the isolation level's snapshot).
 */
import type { BackendLimits } from '../../core/backend.js'
import type { SqlListener } from './adapter.js'

/** A semaphore row. */
export interface SqlSemaphoreRow {
  readonly limit: number
  /** The latest sequence granted while the row lived (0 when none). */
  readonly latest: bigint
}

/** A permits row: a grant or a place in line. */
export interface SqlPermitRow {
  readonly owner: string
  readonly permits: number
  /** A grant (holds its permits) or a place in line. */
  readonly granted: boolean
  /** A grant's sequence; a place's arrival order. */
  readonly sequence: bigint
  /** The lease (or the place) left on the server's clock, in ms; <= 0 when ended. */
  readonly remainingMs: number
  readonly holder?: string | undefined
}

/** What a grant or a place is written with. */
export interface SqlPermitWrite {
  readonly key: string
  readonly owner: string
  readonly permits: number
  /** The lease (grant) or how long the place is kept (line), from the server's now. */
  readonly ms: number
  readonly holder?: string | undefined
  /** The new sequence is above this (and above the store-wide source's next value). */
  readonly after: bigint
}

/** The operations of one transaction (`SqlSemaphoreAdapter.transaction`). */
export interface SqlSemaphoreTx {
  /**
   * Locks `key`'s semaphore row for the transaction. With `limit`, creates it first (storing `limit`, latest
   * 0) when missing; without, `undefined` when missing.
   */
  lock(key: string, limit?: number): Promise<SqlSemaphoreRow | undefined>
  /** `key`'s semaphore row without locking it (a read). */
  peek(key: string): Promise<SqlSemaphoreRow | undefined>
  /** Deletes `key`'s permit rows (grants and places) that ended on the server's clock. */
  purge(key: string): Promise<void>
  /** `key`'s permit rows; `lock`: a locking read (inside an acquire or a release). */
  rows(key: string, lock: boolean): Promise<SqlPermitRow[]>
  /**
   * Makes `owner`'s row a grant (inserted, or its place replaced): a new sequence above `after` and the
   * source, stored as the semaphore's latest; the lease `ms` from the server's now. Returns the sequence.
   */
  grant(write: SqlPermitWrite): Promise<bigint>
  /**
   * Keeps `owner`'s place for `ms` from the server's now: a new place at the end of the line (a sequence
   * above `after`), or the existing place kept where it is.
   */
  queue(write: SqlPermitWrite): Promise<void>
  /**
   * Deletes `owner`'s grant with `sequence`, or (`sequence` undefined: abandon) any row of `owner`: its
   * grant or its place. True when a row went.
   */
  remove(key: string, owner: string, sequence: bigint | undefined): Promise<boolean>
  /** Deletes `key`'s semaphore row when no permit row of it is left (under `lock`). */
  forgetIfIdle(key: string): Promise<void>
  /** Stores `limit` as `key`'s limit, creating the row when missing. */
  setLimit(key: string, limit: number): Promise<void>
  /** Wakes `key`'s waiters when the transaction commits (where the store notifies); else nothing. */
  notify(key: string): Promise<void>
  /** Up to `limit` semaphores with no permit row still running, locked, skipping those locked by others. */
  idle(limit: number): Promise<string[]>
}

export interface SqlSemaphoreAdapter {
  /** Names the store in errors and diagnostics; never contains secrets. */
  readonly id: string
  readonly limits: BackendLimits
  /** The semaphores table and the permits table as messages show them. */
  readonly table: string
  /**
   * Runs `body` in ONE transaction (READ COMMITTED, read-write), committed when it resolves, rolled back
   * when it throws. Settles only once the server answered (do NOT reject early on abort: see
   * `SqlAdapter.acquire`). Failures are `BackendUnavailableError`s naming `what`, `key` and the store.
   */
  transaction<T>(what: string, key: string | undefined, body: (tx: SqlSemaphoreTx) => Promise<T>): Promise<T>
  /**
   * ONE statement: restarts `owner`'s lease of `key` at `ttlMs` from the server's now, only while its grant
   * with `sequence` is there and its lease has not ended on the server's clock (an ended lease is never
   * revived, as the mutex's extend: the permit was free in between). Returns the lease set (ms), or
   * `undefined` when the grant is gone.
   */
  extend(
    key: string,
    owner: string,
    sequence: bigint,
    ttlMs: number,
    signal: AbortSignal,
  ): Promise<number | undefined>
  /** The latest sequence the store-wide source gave (inspect of a forgotten semaphore); undefined: none. */
  latestSequence?(signal: AbortSignal): Promise<bigint | undefined>
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
