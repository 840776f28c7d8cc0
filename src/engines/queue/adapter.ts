/**
 * The adapter interface of the queue-lock engine (engine.ts): the few atomic steps a store must offer
 * for a FIFO lock queue whose entries live on a session's lease. etcd implements it with transactions and
 * watches on a key prefix; ZooKeeper's ephemeral-sequential nodes under the lock's path fit it too (the
 * node's sequence orders the queue, its czxid is the position, its session is the lease).
 *
 * Every method is one request (or one watch) on the store; none waits for other holders, retries or
 * keeps timers: the engine does that.
 */
import type { AcquireRequest, RwLockMode } from '../../core/backend.js'
import type { SessionAdapter } from '../session/adapter.js'
import type { Counted } from './grants.js'

/** Our entry in a lock's queue, once a reply told us its position. */
export interface OwnEntry {
  /** The lock's queue (`QueueAdapter.queueOf`). */
  readonly queue: string
  /** The entry's name, unique to one acquire: it holds the owner id, which nobody else writes. */
  readonly name: string
  /** Its place in line, in creation order (etcd: create revision; ZooKeeper: czxid). It is the fence. */
  readonly position: bigint
}

/** What a read of the queue around our entry found. */
export interface QueueState<Entry> {
  /**
   * The entries created before ours, oldest first: the newest `looksBack` of them (all, when fewer). The
   * engine's grant rule decides from them (grants.ts).
   */
  readonly ahead: readonly Entry[]
  /** Whether our entry still exists (the same entry: same position, not one re-created under its name). */
  readonly mine: boolean
  /** A counting line's (a semaphore's): each entry's permits and the stored limit, for its rule. */
  readonly counted?: Counted<Entry> | undefined
  /** A read-write line's: the mode of each entry of `ahead`, in order (a downgraded writer's is `read`). */
  readonly modes?: readonly RwLockMode[] | undefined
}

/** Something to stop: a watch. */
export interface Cancel {
  /** Stops watching. Never throws; may be called more than once. */
  cancel(): void
}

/** One key's entry of an atomic set (`QueueAdapter.enqueueAll`): what `enqueue` would put in its line. */
export interface SetEntry {
  readonly queue: string
  readonly name: string
  readonly value: string
}

/**
 * What an atomic set's step found: every entry put and first in its line (their positions, in order), or
 * none left behind and, per line, the first entry that is not ours (undefined where none), to wait for.
 */
export type SetEnqueued<Entry> =
  | { readonly positions: readonly bigint[] }
  | { readonly heads: readonly (Entry | undefined)[] }

/** A watch on another's entry, waiting for its deletion. */
export interface Watch extends Cancel {
  /**
   * Settles when the watched entry is deleted, with the store's position of that deletion when the store
   * says (etcd: its revision; a `check` may then read cheaply from there), or with undefined when the watch
   * failed (a hint all the same: the engine re-checks). Never rejects.
   */
  readonly gone: Promise<bigint | undefined>
}

/** What a watch on our own entry (held) reports. */
export interface HeldEvents {
  /** Our entry was deleted (directly, or with its lease); `reason` says so in words. */
  deleted(reason: string): void
  /** The store ended the watch (etcd: its start was compacted away): the engine reads and watches again. */
  failed(): void
}

export interface QueueAdapter<Id, Entry> {
  /** The queue of the lock named `key` (etcd: the key prefix of its entries). */
  queueOf(key: string): string
  /** The name our entry gets on the lease `lease` for `owner`: unique to the acquire (it holds the owner id). */
  nameOf(queue: string, lease: Id, owner: string): string
  /**
   * Puts entry `name` (its value `value`, on lease `lease`) unless it exists already (an earlier attempt
   * of this acquire whose reply was lost), then reads the line ahead of it (etcd: one transaction;
   * ZooKeeper: a create unless a child of that name exists, then a listing: only this acquire writes that
   * name, and only entries older than ours can be before it).
   * `position` is our entry's (undefined if it is not there); `ahead` the entries created before ours,
   * oldest first, the newest `looksBack` of them (all, when fewer), or undefined when the step read the
   * head of the line instead and ours was not among its first `looksBack` entries (etcd, when our key
   * existed already: its create revision is not known before the read). The engine decides from them.
   */
  enqueue(
    queue: string,
    name: string,
    value: string,
    lease: Id,
    looksBack: number,
  ): Promise<{
    readonly position: bigint | undefined
    readonly ahead?: readonly Entry[] | undefined
    readonly counted?: Counted<Entry> | undefined
    readonly modes?: readonly RwLockMode[] | undefined
  }>
  /**
   * Optional (stores that put entries in several lines in one step: etcd's transaction, ZooKeeper's
   * multi): puts every entry of `entries` on lease `lease` only if each is then FIRST in its line, else
   * leaves none of them behind: an atomic set never waits in a line (a set queued behind a sequential
   * holder's key while ahead of it in another would wait for it for ever). Entries of ours found first
   * already (an earlier attempt whose reply was lost) count as put.
   */
  enqueueAll?(entries: readonly SetEntry[], lease: Id): Promise<SetEnqueued<Entry>>
  /**
   * Reads the newest `looksBack` entries before ours and whether ours exists, in one consistent read. With
   * `after` (the position of a deletion a watch told of) the adapter may read cheaply from a replica, and
   * answers 'behind' when that replica had not reached `after` yet (the engine then reads again without it).
   */
  check(entry: OwnEntry, looksBack: number, after?: bigint): Promise<QueueState<Entry> | 'behind'>
  /**
   * Starts watching `entry` for its deletion; resolves once the watch is in place on the store. Rejects
   * once the adapter is closed.
   */
  watch(entry: Entry): Promise<Watch>
  /** Whether `entry` (another's) still exists: read after the watch is in place, so no deletion is missed. */
  exists(entry: Entry): Promise<boolean>
  /** Reads our entry: whether it is still ours, and the store's position at which the read was served. */
  read(entry: OwnEntry): Promise<{ readonly mine: boolean; readonly at: bigint }>
  /**
   * Watches our own entry while held, for deletions after position `from` (its own position, or a later
   * one at which a read saw it): none may be missed, also across reconnections. Moving the entry to another
   * lease is not a deletion. Returns at once (the watch is in place a round trip later).
   */
  watchHeld(entry: OwnEntry, from: bigint, events: HeldEvents): Cancel
  /**
   * Optional (stores whose locks can be resumed from a token: etcd): reads our entry, named in a token,
   * for the process that resumes it: the lease it is on and the store's position the read was served at;
   * null when it is gone or is not the same entry (another position).
   */
  adopt?(entry: OwnEntry): Promise<{ readonly lease: Id; readonly at: bigint } | null>
  /** Owner-checked delete: only our entry (same position) goes. False when it was gone already. */
  remove(entry: OwnEntry): Promise<boolean>
  /** Deletes the entries of these names, unconditionally (the names are unique to one acquire). */
  removeNames(names: readonly string[]): Promise<void>
  /**
   * Optional (etcd; not ZooKeeper, whose ephemeral nodes stay with their session): moves our entry to
   * lease `lease`, only if it is still ours, keeping its position (so its fence and place in line). False
   * when it was gone.
   */
  move?(entry: OwnEntry, value: string, lease: Id): Promise<boolean>
  /**
   * Optional: the value our entry is written with. Without it, "<owner> <holder>" (the mutex's: the owner
   * and the holder's description); an election's adapter writes the candidate's value (`req.value`), as its
   * interop peers do (etcd's `Election`, Curator's `LeaderLatch`).
   */
  entryValue?(req: AcquireRequest): string
  /**
   * Optional (elections): replaces our entry's value, only if the entry is still ours (same position),
   * keeping its lease and position. False when it was gone.
   */
  proclaim?(entry: OwnEntry, value: string): Promise<boolean>
  /**
   * Optional (a counting line's): our entry was granted. The adapter tells the entry behind ours, which
   * waits for our admission or deletion (grants.ts `permitsRule`), if its latest read saw one there.
   */
  admitted?(entry: OwnEntry): void
  /** Says in words that our entry is gone, found missing at position `at` when known. */
  goneReason(at?: bigint): string
  /**
   * Stops whatever the adapter keeps open for its watches, and cancels every watch it made that is still
   * on, in place or still being set up (a wait given up on cancels its watch only once it is in place): a
   * watch left behind may keep the store's client, and the process, alive.
   */
  close(): Promise<void>
}

/** A queue: its entries' adapter, and the session adapter whose leases they live on. */
export interface QueueAdapters<Id, Entry> {
  readonly queue: QueueAdapter<Id, Entry>
  readonly leases: SessionAdapter<Id>
}
