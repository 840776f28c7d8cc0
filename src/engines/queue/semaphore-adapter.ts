/**
 * The adapter interface of the queue engine's counting semaphore (semaphore-engine.ts): the few atomic steps
 * a store must offer for a line of entries, each holding some permits on a session's lease, beside a stored
 * limit. etcd implements it with transactions and one prefix watch per semaphore (src/backends/etcd).
 *
 * Every method is one request (or one watch) on the store; none waits, retries or keeps timers: the
 * engine does that, and decides who is granted from what the adapter read.
 */
import type { Cancel } from './adapter.js'

/** Our entry in a semaphore's line, once a reply told us its position. */
export interface PermitEntry {
  /** The semaphore's line on the store (`SemaphoreAdapter.lineOf`). */
  readonly line: string
  /** The entry's name, unique to one acquire (it holds the owner id, which nobody else writes). */
  readonly name: string
  /** Its place in line, in creation order (etcd: its create revision). It is the grant's sequence. */
  readonly position: bigint
}

/** What an entry says of itself: who wrote it and how many permits it holds or asks for. */
export interface PermitValue {
  readonly owner: string
  readonly permits: number
  /** The limit the writer opened the semaphore with (diagnostics: the stored limit is what counts). */
  readonly limit: number
  readonly holder?: string | undefined
}

/** One consistent read of a semaphore's line around our entry. */
export interface LineRead {
  /** The stored limit; undefined when none is stored. */
  readonly limit: number | undefined
  /** Our entry's position; undefined when it is not there. */
  readonly position: bigint | undefined
  /** The permits of the entries ahead of ours, oldest first: all of them, or the oldest `cap` when not `complete`. */
  readonly ahead: readonly number[]
  /** Whether `ahead` holds every entry ahead of ours. */
  readonly complete: boolean
  /** The store's position of this read (etcd: the revision): a change after it is a reason to read again. */
  readonly at: bigint
}

/** What the prefix watch of a semaphore reports. */
export interface LineEvents {
  /** Something in the line or its limit changed, at the store's position `at`. */
  changed(at: bigint): void
  /** The store ended the watch (its start was compacted away, say): read again, watch again. */
  failed(): void
}

export interface SemaphoreAdapter<Id> {
  /** The line of the semaphore named `name` (etcd: the prefix of its entries). */
  lineOf(name: string): string
  /** The name our entry gets on lease `lease` for `owner`: unique to the acquire (it holds the owner id). */
  nameOf(line: string, lease: Id, owner: string): string
  /**
   * One atomic step: puts entry `name` (with `value`, on `lease`) unless it exists already (an earlier
   * attempt of this acquire whose reply was lost), stores `value.limit` as the semaphore's limit on `lease`
   * unless a limit is stored, then reads the line: the stored limit, our entry, and the entries ahead of it
   * (up to `cap` of them).
   */
  enqueue(line: string, name: string, value: PermitValue, lease: Id, cap: number): Promise<LineRead>
  /** Reads the stored limit, our entry and up to `cap` entries ahead of it, in one consistent read. */
  check(entry: PermitEntry, cap: number): Promise<LineRead>
  /** Whether our entry is still ours (same position). */
  read(entry: PermitEntry): Promise<boolean>
  /**
   * Watches every entry and the limit of `line` for changes after position `from` (none is missed). Returns
   * at once; one watch serves every waiter of this client on that semaphore.
   */
  watch(line: string, from: bigint, events: LineEvents): Cancel
  /** Stores `limit` whatever was stored, keeping the stored key's lease, or on `lease` when none was stored. */
  storeLimit(line: string, limit: number, lease: Id): Promise<void>
  /** Owner-checked delete: only our entry (same position) goes. False when it was gone already. */
  remove(entry: PermitEntry): Promise<boolean>
  /** Deletes the entries of these names, unconditionally (the names are unique to one acquire). */
  removeNames(names: readonly string[]): Promise<void>
  /** Says in words that our entry is gone. */
  goneReason(): string
  /** Cancels every watch it made that is still on. */
  close(): Promise<void>
}
