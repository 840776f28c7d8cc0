/**
 * The contract between the core and a backend. A backend implements ONE attempt of each primitive; the
 * core owns everything else: waiting, deadlines, retries with jitter, renewal, validity, the lost-lock
 * signal and errors. Keep backends small: if one needs a loop, a timer or a retry, it belongs here.
 */

/**
 * How long a store keeps a queued waiter's place in a line without it asking again: max(ttl, 3 s). A queued
 * waiter asks about once a second (the core's slow fallback, `Busy.queued`), and one that stopped without
 * abandoning must not block the line for longer than a lease.
 */
export const placeKeptMs = (ttlMs: number): number => Math.max(ttlMs, 3000)

/** How a backend frees the lease of a holder that died. */
export type ExpiryKind =
  /** The store's own clock expires the lease (Redis PX, SQL now(), the host's monotonic clock for files). */
  | 'server-ttl'
  /** A session with keep-alives expires it (etcd lease, ZooKeeper session). */
  | 'session'
  /** Waiters observe the record unchanged for a whole lease on their own monotonic clock (S3, GCS, DynamoDB). */
  | 'observed'

/** What a backend can do, which the core adapts to (how it waits, what it promises). */
export interface BackendCapabilities {
  /** How the lease of a holder that died is freed. */
  readonly expiry: ExpiryKind
  /** `waitForChange` delivers real notifications (not just a poll). */
  readonly notify: boolean
  /** Waiters are served in arrival order. */
  readonly fifo: boolean
  /**
   * `waitForChange` only registers this waiter locally, on a notification channel that is already
   * listening, or that wakes its waiters once it is (Redis pub/sub): it sends nothing and sets up nothing
   * on the store. A hint armed in the same synchronous turn right after an attempt was sent then misses
   * nothing (no message can be handled in between), so the acquire loop re-arms it there, while that
   * attempt is on the wire, rather than before sending it. Leave it unset where arming starts a watch on
   * the store or where the attempt runs outside the event loop (threadpool file calls): there the hint
   * must be armed before the attempt.
   */
  readonly localHint?: boolean
}

/** One attempt to take `key` for `owner` with a lease of `ttlMs`. */
export interface AcquireRequest {
  /** The lock's name, as the caller gave it. */
  readonly key: string
  /**
   * A random 128-bit id, the same for every attempt of one `acquire()` call. A backend that finds `key`
   * already held by `owner` (an earlier attempt whose reply was lost) must treat it as granted.
   */
  readonly owner: string
  /** The lease asked for, in ms. */
  readonly ttlMs: number
  /**
   * When the acquire began, on the monotonic clock (`performance.now()`): how long its caller has waited
   * so far (a store that bounds starvation marks a waiter refused for too long). The same for every attempt.
   */
  readonly since?: number | undefined
  /**
   * Who asks, in words ("build-7 (pid 4121, `./deploy.sh`)"; at most 256 bytes, no control characters),
   * for `inspect` to show. A backend stores it with the grant where the store can, and never uses it to
   * decide anything: the owner id alone says who holds a key.
   */
  readonly holder?: string | undefined
  /**
   * An election candidate's value (its address, its id: at most `MAX_VALUE_BYTES` of UTF-8), stored with
   * the grant and shown by `inspect` as `value`; what `proclaim` replaces. Absent on a mutex.
   */
  readonly value?: string | undefined
  /** A semaphore's acquire: the limit this client opened it with, and the permits asked for. Absent elsewhere. */
  readonly semaphore?: PermitRequest | undefined
  /** A read-write lock's acquire: the mode asked for. Absent elsewhere. */
  readonly rwlock?: RwLockRequest | undefined
  /**
   * The lock will be handed on with its token (`LockOptions.resumable`; only where `resume` is offered). A
   * store whose locks share a lease (etcd's session per ttl) gives this one a lease of its own. Absent
   * elsewhere.
   */
  readonly resumable?: boolean | undefined
}

/** What a read-write lock's acquire asks for (`AcquireRequest.rwlock`). */
export interface RwLockRequest {
  /** `read`: shared with other readers; `write`: alone. */
  readonly mode: RwLockMode
}

/** A read-write lock's lease: shared (`read`) or exclusive (`write`). */
export type RwLockMode = 'read' | 'write'

/** What a semaphore's acquire asks for (`AcquireRequest.semaphore`). */
export interface PermitRequest {
  /**
   * The semaphore's limit as this client opened it (1 to `MAX_SEMAPHORE_LIMIT`). The store keeps the limit
   * of the semaphore while any permit of it is held or waited for; an acquire with another limit is refused
   * with a `LimitMismatchError`, not granted under either limit.
   */
  readonly limit: number
  /** How many permits this lease holds (1 to `limit`): granted all at once or not at all. */
  readonly permits: number
  /**
   * Set on an acquire's attempts after one the store refused for want of permits: its limit was compared
   * then, so the store follows its own limit without comparing (a `setLimit` while it waits admits it).
   */
  readonly limitCompared?: boolean | undefined
}

/** A successful attempt. */
export interface Grant {
  /** Tells a grant from a `Busy`. */
  readonly granted: true
  /** Strictly greater than every fence granted before for this key. */
  readonly fence: bigint
  /** The lease the store actually granted (may differ from the request, e.g. rounded to seconds). */
  readonly ttlMs: number
  /** Backend-private state the backend needs back in extend/release (a revision, a generation, an etag). */
  readonly cookie?: unknown
  /**
   * For backends whose leases are kept alive by a session (etcd, ZooKeeper): aborts when the backend
   * learns the session is gone (a lease revoked or expired). The core then aborts `lock.signal` at once
   * with a `LockLostError`, instead of at the next renewal. Its reason's message says what happened.
   */
  readonly lost?: AbortSignal | undefined
}

/** A refused attempt: someone else holds the key. */
export interface Busy {
  /** Tells a refusal from a `Grant`. */
  readonly granted: false
  /** When the current holder's lease ends if it is not renewed, when the backend knows: caps the next sleep. */
  readonly retryInMs?: number | undefined
  /**
   * The store keeps this waiter's place in a line and its `waitForChange` wakes it when its turn comes:
   * the core then polls only as a slow fallback (for a lost notification), not from 10 ms up.
   */
  readonly queued?: boolean | undefined
  /**
   * Nobody else holds the key: this acquire's own grant is under way and waits only for the store (a new
   * record's fence settling on the store's clock), about `retryInMs` from now. The acquire keeps trying
   * for that long and one attempt's time more (`minAttemptMs`) even when its timeout is shorter: a
   * `tryAcquire` of a free key is granted.
   */
  readonly pending?: boolean | undefined
}

/** What one attempt of `tryAcquire` ends with: the key, or the word that someone else holds it. */
export type AttemptResult = Grant | Busy

/** What the core hands back to extend and release. */
export interface HeldLease {
  /** The key held. */
  readonly key: string
  /** The owner id of the `AcquireRequest` that was granted. */
  readonly owner: string
  /** The fence of the grant. */
  readonly fence: bigint
  /** The cookie of the grant, or of the latest extend that returned a new one. */
  readonly cookie: unknown
}

/** Diagnostic view of a key. Never use it to decide who may act: only a grant does that. */
export interface LockInfo {
  /** Whether a lease holds the key now. */
  readonly held: boolean
  /** The holder's owner id, while held. */
  readonly owner?: string | undefined
  /** The holder's description (`AcquireRequest.holder`), when the store keeps one. */
  readonly holder?: string | undefined
  /**
   * The fence of the current grant; when free, of the latest one (etcd and ZooKeeper, whose fences are
   * store-wide revisions, give the revision of the latest change instead: at least that fence, and below
   * the next grant's). Absent when the store keeps nothing of the key.
   */
  readonly fence?: bigint | undefined
  /**
   * Remaining lease as the store sees it, in whole ms (the client rounds down). On a session store
   * (ZooKeeper), how long the lock would outlive its holder if it stopped now: the session timeout.
   */
  readonly expiresInMs?: number | undefined
  /** Anything unusual, said plainly (for example an unreadable record treated as held). */
  readonly note?: string | undefined
  /** The leader's value, on an election's facet, while held (`AcquireRequest.value`, or the last proclaimed). */
  readonly value?: string | undefined
}

/**
 * The outcome of `extend`: `renewed` (optionally with a new cookie) or `lost`. Throwing means unknown.
 * `ttlMs`, when given, is the lease the store actually keeps from the extend's start (a session's lease,
 * a server's cap): the core never counts a validity longer than it, whatever ttl was asked for.
 */
export type ExtendResult =
  | { readonly renewed: true; readonly cookie?: unknown; readonly ttlMs?: number | undefined }
  | { readonly renewed: false }

/** One lease's outcome in `extendMany`: its `ExtendResult`, or `{ error }` when its outcome is unknown. */
export type ExtendOutcome = ExtendResult | { readonly renewed?: undefined; readonly error: unknown }

/** What a store can represent; the core refuses other keys and ttls with a `TypeError` before any I/O. */
export interface BackendLimits {
  /** The longest key, in UTF-8 bytes. */
  readonly maxKeyBytes: number
  /** The longest lease the store can keep, in ms. */
  readonly maxTtlMs: number
  /**
   * The shortest lease the store can keep renewed, in ms, where the core's own minimum (`MIN_TTL_MS`) is
   * not enough: a lock is renewed every ttl/3, so a store that takes writes to one lock only so often
   * (GCS: about one a second) loses every lease shorter than three of its write intervals.
   */
  readonly minTtlMs?: number | undefined
  /**
   * How long one attempt may take on a healthy store, in ms, where the core's 1 s is not enough: an acquire
   * gives the store at least this long from its start (a `tryAcquire`, its one attempt). GCS: an attempt
   * right after this process wrote the same object first waits for its write rate (one a second).
   */
  readonly minAttemptMs?: number | undefined
  /** Whether a key may hold NUL (U+0000); false where the store's text cannot (PostgreSQL). @default true */
  readonly nulInKeys?: boolean | undefined
  /**
   * Keys starting with this are refused: the store keeps another primitive's entries under it, in the
   * same space of names as the keys (DynamoDB's elections, whose items share the lock table's key).
   */
  readonly reservedKeyPrefix?: string | undefined
}

/** One held lock, as `list` finds it: `inspect`'s view of its key, with the key. */
export interface ListedLock extends LockInfo {
  /** The lock's key. */
  readonly key: string
}

/** What `breakLock` is told. */
export interface BreakOptions {
  /**
   * Break only the grant with this fence: when another grant holds the key by then (the stuck holder's
   * lease ended and someone else took it), leave it alone. Without it, the grant the break first reads,
   * whoever holds it; never one granted after that read.
   */
  readonly fence?: bigint | undefined
  /** Gives up on the call when it aborts. */
  readonly signal?: AbortSignal | undefined
}

/** What `breakLock` did. */
export interface BreakResult {
  /** True when this call ended a lease; false when the key was free, or held by a grant of another fence. */
  readonly broken: boolean
  /** The lease it ended, or the one it left alone; absent when the key was free. */
  readonly lease?:
    | { readonly owner: string; readonly fence: bigint; readonly holder?: string | undefined }
    | undefined
}

/** One finding of `doctor`. */
export interface DoctorFinding {
  /** How much it matters: `error` means locks are not safe on this store as it is set up. */
  readonly level: 'ok' | 'info' | 'warn' | 'error'
  /** What was found, and what to do about it. */
  readonly message: string
}

/**
 * The leased methods of one primitive: one attempt, extend, release, abandon, inspect and the wake-up
 * hint. The core's acquire loop, renewal and handle run over any of them: the mutex (the backend
 * itself) and the election facet are both one.
 *
 * Every method gets an AbortSignal. It aborts when the caller gives up (abort, deadline, client closed);
 * once the call has settled the core may hand the same signal to a later call, so detach any listener
 * you added when your call settles.
 */
export interface LeaseFacet {
  /** Names the store in errors and diagnostics, e.g. `file:///var/lock/fencelock`. Never contains secrets. */
  readonly id: string
  /** What the store can do: how leases expire, whether waiters are notified and served in order. */
  readonly capabilities: BackendCapabilities
  /** Key and ttl limits; without them the core applies `DEFAULT_LIMITS` (src/core/options.ts). */
  readonly limits?: BackendLimits | undefined
  /** One attempt. Must not wait for the holder. Throw `BackendUnavailableError` when the store is unreachable. */
  tryAcquire(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult>
  /**
   * Extends the lease only if `lease.owner` still holds it (never a blind write). Throw = outcome unknown:
   * the core then counts the earlier of the validity it had and `ttlMs` from this call's start, so a
   * request that may have landed must leave the lease kept at least that long.
   */
  extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult>
  /**
   * Optional: extends many leases at once, as `extend` would each (`leases[i]` by `ttlMs[i]`), in as few
   * requests as the store allows (one script per batch of keys, a statement per table): the core renews
   * every lock whose renewal comes due at the same moment through it. Resolves with one outcome per lease,
   * in order; a rejection makes every outcome unknown. The core counts each validity from the call's start.
   * It stops waiting after the latest validity among them. A release of one of these locks waits for the
   * call to settle; a lock declared lost meanwhile ignores its outcome. Without it, one `extend` each.
   */
  extendMany?(
    leases: readonly HeldLease[],
    ttlMs: readonly number[],
    signal: AbortSignal,
  ): Promise<readonly ExtendOutcome[]>
  /** Releases only if `lease.owner` still holds it; `false` when it was no longer ours. */
  release(lease: HeldLease, signal: AbortSignal): Promise<boolean>
  /** A diagnostic view of `key`, read without changing anything; `null` when the store keeps nothing of it. */
  inspect(key: string, signal: AbortSignal): Promise<LockInfo | null>
  /**
   * A wake-up hint: resolves when `key` may have changed (released, expired, taken over) after the call
   * began, or when `signal` aborts; the core then re-attempts. May resolve spuriously. A backend that
   * hands a released lock straight to a waiter (a fair queue) resolves with that waiter's Grant instead;
   * the core counts its validity from the start of the waiter's last refused attempt, which the hand-over
   * necessarily followed.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a plain hint (most backends) resolves with nothing
  waitForChange?(req: AcquireRequest, signal: AbortSignal): Promise<Grant | undefined | void>
  /**
   * Called once when an acquire gives up without a grant (deadline, abort, close, error) after at least one
   * attempt, and only once that acquire's last attempt has settled (or was given up on): the attempt may
   * have been granted on the store although its caller never heard of it (an abort racing the reply, a
   * lost reply). Must remove whatever `req.owner` may hold or have queued for `req.key`, owner-checked and
   * never blind, whether or not any attempt reported a grant. Required: no backend may forget it.
   */
  abandon(req: AcquireRequest, signal: AbortSignal): Promise<void>
}

/** What `proclaim` did: replaced the leader's value (with a new cookie, where the store's has one), or not. */
export type ProclaimResult =
  | { readonly proclaimed: true; readonly cookie?: unknown }
  | { readonly proclaimed: false }

/**
 * Leader election: a lease on the election's name whose holder leads, with the candidate's value stored
 * beside it (`AcquireRequest.value`). Names live apart from the mutex's, except where a peer's layout
 * makes them one (etcd: Go's `Mutex` and `Election` share a prefix; see each backend's page). The fence
 * of a grant is the leader's term.
 */
export interface ElectionFacet extends LeaseFacet {
  /**
   * Replaces the value stored with `lease`'s grant, only while that grant still holds it (owner and fence
   * checked, never a blind write). Throw = outcome unknown.
   */
  proclaim(lease: HeldLease, value: string, signal: AbortSignal): Promise<ProclaimResult>
  /**
   * For an observer, who holds no lease: resolves when who leads `key`, or its value, may have changed after
   * the call began (a release, an expiry, a grant, a proclaim), or when `signal` aborts. May resolve
   * spuriously. Without it, observers poll `inspect`.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a hint, like waitForChange
  watch?(key: string, signal: AbortSignal): Promise<void | undefined>
}

/** One lease holding permits of a semaphore, as `SemaphoreFacet.holders` finds it. */
export interface PermitHolder {
  /** The owner id of the acquire that was granted (`HeldPermits.owner`). */
  readonly owner: string
  /** The holder's description (`AcquireRequest.holder`), when the store keeps one. */
  readonly holder?: string | undefined
  /** How many permits this lease holds. */
  readonly permits: number
  /** The grant's sequence (its `Grant.fence`): unique and increasing per semaphore, not a fence. */
  readonly sequence?: bigint | undefined
  /** Remaining lease as the store sees it, in whole ms. */
  readonly expiresInMs?: number | undefined
}

/** A semaphore as the store keeps it now. Diagnostic: only a grant admits. */
export interface SemaphoreInfo {
  /** The stored limit. */
  readonly limit: number
  /** The permits held by valid leases (at most `limit`, unless `setLimit` lowered it under them). */
  readonly held: number
  /** The leases holding them. */
  readonly holders: readonly PermitHolder[]
  /** How many acquires wait in the store's line, where it keeps one. */
  readonly waiting?: number | undefined
}

/**
 * A counting semaphore: at most `limit` permits held by valid leases at any moment, each lease renewed,
 * released and lost as a lock's is. The leased methods take requests with `semaphore` set and leases whose
 * `key` is the semaphore's name and `owner` the acquire's; `tryAcquire` grants `permits` at once when they
 * fit under the stored limit (and, where the store keeps a line, no earlier waiter is ahead), with the grant's
 * `fence` the permit's sequence: unique and increasing, but not a fence (several leases are valid at once).
 * It throws a `LimitMismatchError` when the store keeps another limit. Expiry on the store's clock only.
 * `inspect(name)` says `held` while any permit is held, with the latest sequence as `fence`.
 */
export interface SemaphoreFacet extends LeaseFacet {
  /** The semaphore's stored limit and valid leases; `null` when the store keeps nothing of it. */
  holders(name: string, signal: AbortSignal): Promise<SemaphoreInfo | null>
  /**
   * Stores `limit` as the semaphore's limit, whatever it was (creating the semaphore if needed), and wakes
   * its waiters. Leases held beyond a lowered limit stay valid; no new permit is granted until they fit.
   */
  setLimit(name: string, limit: number, signal: AbortSignal): Promise<void>
}

/** One lease of a read-write lock, as `RwLockFacet.holders` finds it. */
export interface RwLockHolder {
  /** The owner id of the acquire that was granted. */
  readonly owner: string
  /** Shared or exclusive (a downgraded writer is a reader). */
  readonly mode: RwLockMode
  /** The holder's description (`AcquireRequest.holder`), when the store keeps one. */
  readonly holder?: string | undefined
  /** The grant's fence: a writer's, or its read epoch's. */
  readonly fence?: bigint | undefined
  /** Remaining lease as the store sees it, in whole ms. */
  readonly expiresInMs?: number | undefined
}

/** A read-write lock as the store keeps it now. Diagnostic: only a grant admits. */
export interface RwLockInfo {
  /** The valid leases: readers, or one writer (or one downgraded writer and readers). */
  readonly holders: readonly RwLockHolder[]
  /** How many acquires wait in the store's line. */
  readonly waiting: number
  /** The latest fence the lock granted, when the store keeps it. */
  readonly fence?: bigint | undefined
}

/** What `downgrade` did: turned the write lease into a read lease (with a new cookie, where the store has one), or not. */
export type DowngradeResult =
  | { readonly downgraded: true; readonly cookie?: unknown }
  | { readonly downgraded: false }

/**
 * Read-write locks: one line of readers and writers per name, in arrival order. The leased methods take
 * requests with `rwlock` set; `tryAcquire` grants a reader when no writer is ahead of it in line (held or
 * waiting), a writer when it is first, and otherwise keeps the request's place (`queued`) until it asks
 * again, is abandoned, or stops asking for a while. Fences: a writer's is greater than every earlier grant,
 * readers' included; a reader's is its read epoch's, greater than every writer granted before it and smaller
 * than every writer granted after it (readers of one epoch share it). `inspect(name)` says `held` while any
 * lease holds, with the latest fence.
 */
export interface RwLockFacet extends LeaseFacet {
  /**
   * Turns `lease`, a write lease, into a read lease in its own entry: the same place in line, owner and
   * fence, so no waiting writer gets in between. Owner and fence checked; `downgraded: false` when the
   * lease is no longer ours. Throw = outcome unknown.
   */
  downgrade(lease: HeldLease, signal: AbortSignal): Promise<DowngradeResult>
  /** The valid leases and the line's length; `null` when the store keeps nothing of `name`. */
  holders(name: string, signal: AbortSignal): Promise<RwLockInfo | null>
}

/**
 * Lets another process (or this one after a restart) continue a held lock from its token (`lock.token()`,
 * `locks.resume(token)`). Offered only where the lease outlives the process that took it and the store checks
 * ownership by the owner id alone (and the fence), so that whoever presents them acts as the holder would:
 * never where a lease dies with its connection or session. The core reads the key first (`inspect`), then
 * extends it owner-checked: the extend decides, as a renewal does.
 */
export interface ResumeFacet {
  /**
   * The grant's cookie as plain JSON data for a token (strings, numbers, arrays, objects: no bigint), or
   * undefined when the backend needs none (it checks the owner alone, or reads the rest back in `decode`).
   * No store credentials: the token is handed to other processes. Throws a `CapabilityError` for a lease
   * that cannot be handed on as it was taken (etcd: one acquired without `resumable`).
   */
  encode(lease: HeldLease): unknown
  /**
   * The cookie of `lease` (its cookie field is what `encode` gave) for extend and release in this process,
   * read back from the store where the backend needs the current state; `null` when the store no longer has
   * the lease under its owner and fence. Throws a `TypeError` when `lease.cookie` is not what `encode` makes.
   * `lost`, for a lease kept alive by a session: aborts when the store says it ended (as `Grant.lost`).
   */
  decode(
    lease: HeldLease,
    signal: AbortSignal,
  ): Promise<{ readonly cookie: unknown; readonly lost?: AbortSignal | undefined } | null>
}

/** What one attempt of an atomic multi-key acquire ends with: a grant per key (in request order), or `Busy`. */
export type AllAttemptResult = { readonly granted: true; readonly grants: readonly Grant[] } | Busy

/**
 * Atomic multi-key acquisition: ONE attempt that takes every key of a set in one atomic step of the store,
 * or none. The leases it makes are the mutex's own, laid out as a single `tryAcquire` would make each, so
 * every key is then extended, released, abandoned and woken on through the mutex's methods; only the taking
 * is new. The core owns the loop (waiting on a change of any key, the deadline, the clean-up of every key
 * after an attempt whose outcome is unknown).
 */
export interface MultiKeyFacet {
  /**
   * Why this store cannot take `keys` in one step, in words for a `CapabilityError` (Redis Cluster: keys in
   * more than one slot); undefined when it can. Asked before any I/O.
   */
  refusal?(keys: readonly string[]): string | undefined
  /**
   * One attempt over `requests` (one per key, sorted by the keys' UTF-8 bytes, one owner): every key granted
   * in one atomic step, each with its own fence by that key's own rule, or `Busy` with nothing taken. A key
   * already held by the owner (an earlier attempt whose reply was lost) counts as granted. Must not wait.
   */
  tryAcquireAll(requests: readonly AcquireRequest[], signal: AbortSignal): Promise<AllAttemptResult>
  /**
   * Optional: waits, after a `Busy` of `tryAcquireAll` for these `requests`, for a change that may free the
   * set, where the store has no wake-up of each key's mutex for it (a queue store: the set keeps no entry in
   * any line, and a key's mutex wakes only an entry). Absent: a change of any key, by the mutex's
   * `waitForChange`. Never rejects; resolves early on any doubt (the core attempts again).
   */
  waitForChange?(requests: readonly AcquireRequest[], signal: AbortSignal): Promise<void>
}

/**
 * A backend: the mutex's leased methods on the backend object itself, the operator's methods (list,
 * break, doctor), and one optional facet per further primitive. The client refuses a primitive whose
 * facet is missing with a `CapabilityError`, before any I/O.
 */
export interface LockBackend extends LeaseFacet {
  /** Leader election on this store; absent where the backend offers none. */
  readonly election?: ElectionFacet | undefined
  /** Counting semaphores on this store; absent where the backend offers none. */
  readonly semaphore?: SemaphoreFacet | undefined
  /** Resuming a held lock in another process from its token; absent where a lease dies with its holder. */
  readonly resume?: ResumeFacet | undefined
  /** Read-write locks on this store; absent where the backend offers none. */
  readonly rwlock?: RwLockFacet | undefined
  /** Taking several keys in one atomic step (`acquireAll(keys, { atomic: true })`); absent where it cannot. */
  readonly multiKey?: MultiKeyFacet | undefined
  /**
   * Where `multiKey` is absent, why this store cannot take several keys in one atomic step, in a few words
   * for the `CapabilityError` (which adds what to do instead).
   */
  readonly multiKeyRefusal?: string | undefined
  /**
   * The held locks whose keys start with `prefix` (every one for ''), in any order, a page of the store at
   * a time: a store with 50,000 held locks must not be read into memory at once. Free keys are left out.
   * Each is `inspect`'s view of its key (its owner, holder, fence, remaining lease), read without
   * changing anything.
   */
  list?(prefix: string, signal: AbortSignal): AsyncIterable<ListedLock>
  /**
   * Frees `key` whoever holds it: an operator's way out of a stuck lock. Atomic on the store (it ends the
   * lease it read, never one granted since), and it keeps the fence: the next grant's is greater, as after
   * a release. The holder is not told at once; its next renewal finds the lease gone (`lock.signal`
   * aborts). Waiters wake as after a release.
   */
  breakLock?(key: string, options?: BreakOptions): Promise<BreakResult>
  /** Checks the store's settings and semantics we rely on, for `fencelock doctor`. */
  doctor?(signal: AbortSignal): Promise<DoctorFinding[]>
  /** Closes only what the backend itself opened. */
  close(): Promise<void>
}
