/**
 * The queue-lock engine: a FIFO lock over a queue of entries on a store, each entry living on a session's
 * lease (session/pool.ts). Apache Curator's `LockInternals` is the model; so is etcd's `concurrency.Mutex`.
 *
 * - An acquire puts our entry (one atomic step that also reads the entries ahead of ours), or finds it
 *   there: a retried attempt whose reply was lost. The entry's name is unique to the acquire. Who holds is
 *   the engine's grant rule over the entries ahead (grants.ts; a mutex: the first in creation order), never
 *   the adapter's; the entry's position is the fence (the store's creation order never goes back). A
 *   hand-over writes nothing: the next entry in line is the next holder (a counting line's adapter may
 *   tell the waiter behind of it, `QueueAdapter.admitted`).
 * - Waiting watches only the entry the rule waits for (a mutex: the one just before ours; a semaphore's
 *   first waiter: the line, a later one: the waiter ahead; the watch in place first, then a read that it
 *   is still there, so a deletion between the two is not missed), and every wake-up is a hint followed
 *   by a re-check: the rule is met, AND ours still exists. A waiter whose lease died while it waited
 *   must never be granted (Jepsen's etcd #11456). What a wait knows between its reads (the entry before
 *   ours, the latest read that found it in place) spares the reads the core's attempts would send
 *   meanwhile (line.ts). The fallback for a watch that went silent is the wait's own read that the
 *   entry before ours is still there, once per recheck interval (the lease, 15-60 s): an idle waiter costs
 *   the store one read per interval, not one per poll of the core.
 * - A grant's lease is what the session is known to keep (`aliveUntil`), counted from no earlier than the
 *   start of the attempt the core counts the grant's validity from (a hand-over's: the waiter's last one);
 *   a holder watches its own entry, and its deletion or the session's loss aborts the grant's `lost` signal.
 * - Abandon deletes our entries by name once every write an attempt sent has settled (a delete sent before
 *   one lands would leave its entry). A clean-up or release whose delete fails retires the session, so the
 *   entry goes with the lease once no lock still needs it, and is sent again until the store answers it
 *   (leftovers.ts): our own waiters queued behind the entry would otherwise keep that session alive.
 *
 * Requests on etcd, four clients contending (test/backends/etcd/requests.test.ts): two raft writes per
 * acquisition (the put, the release's delete) and two reads (once the watch is in place, at the wake-up);
 * a hand-over waits for one raft write, the delete. A little over 300 lines: an acquisition's steps
 * (attempt, wait, extend, release, abandon) share its state and are read together.
 *
 * Adapter: `QueueAdapter` (adapter.ts) for the queue, `SessionAdapter` (session/adapter.ts) for the leases.
 * The leased methods that forward to it: leased-methods.ts; the backend object: backend.ts.
 * Used by: etcd (src/backends/etcd), ZooKeeper (src/backends/zookeeper).
 */
import { linkedAbort, raceSignal } from '../../core/abort.js'
import type {
  AcquireRequest,
  AllAttemptResult,
  AttemptResult,
  ExtendResult,
  Grant,
} from '../../core/backend.js'
import { jitter, now, sleep } from '../../core/clock.js'
import type { SessionAdapter } from '../session/adapter.js'
import { SessionPool } from '../session/pool.js'
import { Acquisition, Acquisitions, afterGrant } from './acquisition.js'
import type { OwnEntry, QueueAdapter, QueueState, Watch } from './adapter.js'
import { FIRST_IN_LINE, type GrantRule } from './grants.js'
import { Leftovers } from './leftovers.js'
import { type PlaceInLine, PlacesInLine, recheckMs, trustFor } from './line.js'

export type { Acquisition } from './acquisition.js'

const BUSY = { granted: false } as const

export interface QueueLockOptions {
  /** Who is granted (grants.ts), or the rule of each request (a semaphore's: its permits). @default FIRST_IN_LINE, a mutex */
  readonly grants?: GrantRule | ((req: AcquireRequest) => GrantRule) | undefined
  /** The sessions' idle time (tests). @default idleMs (session/pool.ts) */
  readonly idleMs?: ((leaseMs: number) => number) | undefined
  /** How long a waiter goes without reading the line itself (tests). @default recheckMs (line.ts) */
  readonly recheckMs?: ((leaseMs: number) => number) | undefined
}

export class QueueLock<Id, Entry> {
  readonly #adapter: QueueAdapter<Id, Entry>
  /** Who is granted, from the entries ahead of ours (grants.ts): the rule of a request. */
  readonly #grants: (req: AcquireRequest) => GrantRule
  readonly #pool: SessionPool<Acquisition<Id>, Id>
  readonly #acqs: Acquisitions<Id, Entry>
  /** What the engine knows of each acquisition's place in line between its reads (line.ts). */
  readonly #lines = new PlacesInLine<Id, Entry>()
  /** Entries whose release or clean-up failed, deleted again once the store answers (leftovers.ts). */
  readonly #leftovers = new Leftovers()
  /** How long a waiter goes without reading the line itself while its watch listens (line.ts). */
  readonly #recheck: (leaseMs: number) => number
  /**
   * Aborted by `close`: every wait still under way ends, and no attempt or move takes a session (a lease
   * granted after the pool closed would be kept alive by nobody's close, and keep the process alive).
   */
  readonly #closing = new AbortController()
  /** Per atomic set still trying (its owner): the entries first in its lines at its latest refusal. */
  readonly #heads = new Map<string, readonly Entry[]>()

  constructor(adapter: QueueAdapter<Id, Entry>, leases: SessionAdapter<Id>, options: QueueLockOptions = {}) {
    this.#adapter = adapter
    const grants = options.grants ?? FIRST_IN_LINE
    this.#grants = typeof grants === 'function' ? grants : () => grants
    this.#recheck = options.recheckMs ?? recheckMs
    this.#pool = new SessionPool(
      leases,
      (session, reason) => this.#acqs.sessionLost(session, reason),
      options.idleMs,
    )
    this.#acqs = new Acquisitions(adapter, this.#pool)
  }

  /** One attempt (`LockBackend.tryAcquire`): puts our entry or finds it, granted if it is first in line. */
  async attempt(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const started = now()
    const rule = this.#grants(req)
    let acq = this.#acqs.of(req)
    acq.attemptedAt = started
    // Already in line (an earlier attempt put our entry): a read says whether we are first now, without
    // the write (a raft round and an fsync on etcd), unless our wait has just read it (`PlacesInLine.watching`).
    if (acq.entry !== undefined) {
      if (!acq.session!.lost.aborted) {
        const trust = trustFor(this.#recheck(acq.session!.leaseMs))
        if (await this.#lines.watching(acq, trust, signal)) return BUSY
        const { ahead, mine, counted, modes } = await this.#check(acq.entry, rule, signal)
        if (mine) {
          const decision = rule.decide(ahead, counted, modes)
          this.#lines.of(acq).before = decision.granted ? undefined : decision.waitFor
          return decision.granted ? this.#grantOf(acq, started) : BUSY
        }
      }
      // Our entry is gone (or its session is, and the entry with its lease): this acquisition is over, and
      // a new one puts a new entry below. Its old names and writes stay with abandon, in case.
      const { names, inflight } = acq
      this.#acqs.markLost(acq, this.#adapter.goneReason())
      acq = this.#acqs.of(req)
      // This attempt is the new acquisition's first too: a hand-over to it counts its lease from here
      // (left at -Infinity, a hand-over would report the lease's whole length, past what its session
      // is known to live; no path is known to hand over before the next attempt, but none may).
      acq.attemptedAt = started
      for (const name of names) acq.names.add(name)
      acq.inflight = inflight
    }
    const leaseMs = this.#pool.leaseMs(req.ttlMs)
    const session = req.resumable ? this.#ownSession(acq, leaseMs) : this.#session(leaseMs)
    // Counted at once, so it is not retired while we wait for its lease id: from the write on, our entry
    // may be on this lease. (A session lost before the write took whatever an earlier attempt put.)
    this.#acqs.attach(acq, session)
    if (acq.session && acq.session !== session) this.#acqs.detach(acq, acq.session)
    acq.session = session
    const lease = await raceSignal(session.id, signal)
    // Given up on meanwhile: send no write that abandon, perhaps under way already, would not wait for.
    signal.throwIfAborted()
    if (acq.ended) return BUSY
    const name = this.#adapter.nameOf(acq.queue, lease, req.owner)
    acq.name = name
    acq.names.add(name)
    // A lease not known to last this lock's ttl is kept alive in the same moment (in parallel: no extra
    // wait), so the grant gets its full ttl from before the request. Not when this client's latest write
    // on this lock found it held: a waiter's lease counts from its later hand-over, and a keep-alive beside
    // its write would be for nothing (measured, a sixth of a contended etcd acquire's requests); found
    // first after all, the write is followed by the keep-alive. Where any answered request keeps the
    // lease alive (ZooKeeper), the write's own answer is that keep-alive, counted from before its send:
    // one request fewer, and none queued ahead of the write on the connection.
    const viaWrite = this.#pool.requestsKeepAlive(session)
    const late = !viaWrite && this.#lines.foundHeld.has(acq.queue)
    let refresh = viaWrite || late ? undefined : this.#pool.refresh(session, req.ttlMs)
    const sentAt = now()
    const put = this.#adapter.enqueue(acq.queue, name, acq.value, lease, rule.looksBack)
    // Kept for abandon: the core gives up on this attempt when its signal aborts, but the store may still
    // apply the write; only once it has settled can a delete by name be the last word. Chained: an
    // attempt given up on at the core's deadline may still be in flight when the next one is sent.
    const settled = put.then(
      () => {},
      () => {},
    )
    acq.inflight = acq.inflight ? Promise.all([acq.inflight, settled]) : settled
    const { position, ahead, counted, modes } = await raceSignal(put, signal)
    if (position === undefined) return BUSY
    // Answered, our entry there: the store heard from the lease no earlier than `sentAt`.
    if (viaWrite) this.#pool.answered(session, sentAt)
    acq.entry = { queue: acq.queue, name, position }
    // No `ahead`: entries ahead of ours, not read (`QueueAdapter.enqueue`); the wait reads them.
    const decision = ahead === undefined ? undefined : rule.decide(ahead, counted, modes)
    if (!decision?.granted) {
      this.#lines.foundHeld.set(acq.queue, true)
      this.#lines.of(acq).before = decision?.waitFor
      return BUSY
    }
    this.#lines.foundHeld.delete(acq.queue)
    if (late) refresh = this.#pool.refresh(session, req.ttlMs)
    if (refresh) await this.#pool.settle(refresh, signal)
    return this.#grantOf(acq, started)
  }

  /**
   * Waits in line (`LockBackend.waitForChange`): resolves with a grant once our entry is first, or with
   * nothing when the wait ends otherwise (our entry or session gone, `signal` aborted, the store failing);
   * the core then attempts again.
   */
  async wait(req: AcquireRequest, signal: AbortSignal): Promise<Grant | undefined> {
    const acq = this.#acqs.get(req)
    if (!acq || acq.ended || acq.entry === undefined) return undefined
    const entry = acq.entry
    const rule = this.#grants(req)
    const line = this.#lines.of(acq)
    const link = linkedAbort(signal, acq.session!.lost, this.#closing.signal)
    /** The watch that woke us, cancelled only after the check that follows its event (see below). */
    let previous: Watch | undefined
    /** This wait's `line.watched` (line.ts), and what settles it. */
    let watched: Promise<number | undefined> | undefined
    let tell: ((sentAt: number | undefined) => void) | undefined
    try {
      /** The position of the predecessor's deletion, once a watch told us of it. */
      let seen: bigint | undefined
      // The entry before ours as the latest read found it (the enqueue, an attempt's check) is watched
      // without reading again first: still there, it is still the newest before ours (no entry is ever
      // created before an existing one); gone, the read after the watch says so and we check.
      let before = line.before
      while (!link.signal.aborted) {
        if (before === undefined) {
          const state = await this.#check(entry, rule, link.signal, seen)
          // The watch that woke us is cancelled after this check (cancelling sends a request on the watch
          // stream, and closes the stream with the last one: done before, it made the check 1.5-3 ms slower
          // on etcd, measured), and after a grant once that has reached its caller (`afterGrant`).
          const woke = previous
          previous = undefined
          // Our entry is gone (its lease died while we waited): never a grant; the next attempt re-enters.
          if (!state.mine) {
            woke?.cancel()
            this.#acqs.markLost(acq, this.#adapter.goneReason())
            return undefined
          }
          // Handed over while we waited. The core counts its validity from the start of its last refused
          // attempt, so the lease left counts from there too: counted from now, the time since that
          // attempt (up to a poll interval, 1 s) came off twice, and with a 1 s lease the grant could be
          // expired on arrival (released, and the waiter sent to the back of the line). If the core does
          // not take it (its caller aborted meanwhile), abandon deletes the entry by name.
          const decision = rule.decide(state.ahead, state.counted, state.modes)
          if (decision.granted) {
            const grant = this.#grantOf(acq, acq.attemptedAt)
            afterGrant(() => woke?.cancel())
            return grant.granted ? grant : undefined
          }
          woke?.cancel()
          before = decision.waitFor
          line.before = before
        }
        watched = new Promise<number | undefined>((resolve) => {
          tell = resolve
        })
        line.watched = watched
        previous = await this.#watch(before, link.signal)
        // Only then do we make sure that entry is still there: a deletion before the watch began would
        // otherwise never wake us.
        const sentAt = now()
        const still = await raceSignal(this.#adapter.exists(before), link.signal)
        if (still) line.freshAt = sentAt
        tell?.(still ? sentAt : undefined)
        seen = still ? await this.#gone(previous, before, line, acq, link.signal) : undefined
        // Told of a deletion (or the watch failed): the attempts meanwhile read for themselves again.
        if (line.watched === watched) line.watched = undefined
        line.freshAt = undefined
        before = undefined
      }
      return undefined
    } catch {
      return undefined
    } finally {
      tell?.(undefined)
      if (line.watched === watched) {
        line.watched = undefined
        line.freshAt = undefined
      }
      previous?.cancel()
      link.dispose()
    }
  }

  /**
   * One attempt of an atomic set (`MultiKeyFacet.tryAcquireAll`): every key's entry put in one step of the
   * store, each first in its line, or none left behind (`QueueAdapter.enqueueAll`). Each key gets the
   * acquisition a single acquire of it would have, on one session, so the mutex's extend, release and
   * abandon serve it; each key's fence is its entry's position, as for a single acquire.
   */
  async attemptAll(reqs: readonly AcquireRequest[], signal: AbortSignal): Promise<AllAttemptResult> {
    const enqueueAll = this.#adapter.enqueueAll
    if (!enqueueAll) throw new Error('this queue cannot take several keys at once: its adapter cannot')
    const started = now()
    const acqs = reqs.map((req) => this.#acqs.of(req))
    const session = this.#session(this.#pool.leaseMs(reqs[0]!.ttlMs))
    for (const acq of acqs) {
      acq.attemptedAt = started
      this.#acqs.attach(acq, session)
      if (acq.session && acq.session !== session) this.#acqs.detach(acq, acq.session)
      acq.session = session
    }
    const lease = await raceSignal(session.id, signal)
    signal.throwIfAborted()
    if (acqs.some((acq) => acq.ended)) return BUSY
    const entries = acqs.map((acq) => {
      const name = this.#adapter.nameOf(acq.queue, lease, acq.owner)
      acq.name = name
      acq.names.add(name)
      return { queue: acq.queue, name, value: acq.value }
    })
    const viaWrite = this.#pool.requestsKeepAlive(session)
    const refresh = viaWrite ? undefined : this.#pool.refresh(session, reqs[0]!.ttlMs)
    const sentAt = now()
    const put = enqueueAll.call(this.#adapter, entries, lease)
    // As for a single attempt: abandon deletes by name only once this write has settled.
    const settled = put.then(
      () => {},
      () => {},
    )
    for (const acq of acqs) acq.inflight = acq.inflight ? Promise.all([acq.inflight, settled]) : settled
    const found = await raceSignal(put, signal)
    if (viaWrite) this.#pool.answered(session, sentAt)
    if (!('positions' in found)) {
      this.#heads.set(
        reqs[0]!.owner,
        found.heads.filter((head) => head !== undefined),
      )
      return BUSY
    }
    this.#heads.delete(reqs[0]!.owner)
    if (refresh) await this.#pool.settle(refresh, signal)
    const grants: Grant[] = []
    for (const [i, acq] of acqs.entries()) {
      acq.entry = { queue: acq.queue, name: entries[i]!.name, position: found.positions[i]! }
      const grant = this.#grantOf(acq, started)
      // Ended meanwhile (a concurrent clean-up): the core's abandon of every key removes the others.
      if (!grant.granted) return BUSY
      grants.push(grant)
    }
    return { granted: true, grants }
  }

  /**
   * Waits after a refused `attemptAll` (`MultiKeyFacet.waitForChange`) for the deletion of any entry that
   * stood first in one of the set's lines: the set keeps no entry of its own to be woken in. Each watch in
   * place first, then a read that its entry is still there (as a single wait does). Resolves on any doubt.
   */
  async waitAll(reqs: readonly AcquireRequest[], signal: AbortSignal): Promise<void> {
    const heads = this.#heads.get(reqs[0]!.owner)
    if (!heads || heads.length === 0) return
    const link = linkedAbort(signal, this.#closing.signal)
    const watches: Watch[] = []
    try {
      for (const head of heads) watches.push(await this.#watch(head, link.signal))
      const still = await raceSignal(
        Promise.all(heads.map((head) => this.#adapter.exists(head))),
        link.signal,
      )
      if (still.every(Boolean))
        await raceSignal(Promise.race(watches.map((watch) => watch.gone)), link.signal)
    } catch {
      // An abort, a closed adapter or a failed read: the core's next attempt says what holds.
    } finally {
      for (const watch of watches) watch.cancel()
      link.dispose()
    }
  }

  /** `LockBackend.extend`: a keep-alive beside a read (same or shorter lease), or a move to a longer one. */
  async extend(acq: Acquisition<Id>, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    const start = now()
    if (acq.ended || acq.session!.lost.aborted) return BUSY_EXTEND
    const leaseMs = this.#pool.leaseMs(ttlMs)
    // A lease of its own is never left (a token may name the entry on it): a longer ttl is kept as long
    // as that lease, and said so (`ExtendResult.ttlMs`).
    const stay = leaseMs <= acq.session!.leaseMs || !this.#adapter.move || acq.session!.own
    if (stay) return await this.#renew(acq, start, signal)
    return await this.#move(acq, leaseMs, start, signal)
  }

  /** `LockBackend.release`: an owner-checked delete of our entry. */
  async release(acq: Acquisition<Id>, signal: AbortSignal): Promise<boolean> {
    const sessions = [...acq.on]
    // Ours is not a loss: ended first, so the watch on our entry ignores our own delete. The delete goes
    // out before that watch is cancelled (a message of its own): the next waiter waits for the delete only.
    acq.ended = true
    // A grant of this acquisition still on its way to the core (a hand-over computed while the core gave
    // back another one that came too late) must not be taken: its `lost` is aborted. A handle stops
    // listening before it releases, so a caller's own release is not reported as a loss.
    acq.lost?.abort(new Error('released'))
    const entry = acq.entry
    const removed = entry === undefined ? undefined : this.#adapter.remove(entry)
    this.#acqs.end(acq)
    if (entry === undefined || removed === undefined) return false
    // Those still on its session may be our own waiters behind it, who keep the session alive: the
    // delete goes again once the store answers (leftovers.ts).
    removed.catch(() => this.#leftovers.retry(() => this.#adapter.remove(entry), sessions))
    try {
      return await raceSignal(removed, signal)
    } catch (error) {
      // The entry may stay on its lease: no new lock uses that session, which is revoked (taking the
      // entry) once the locks still on it are done, instead of living as long as this client.
      for (const session of sessions) this.#pool.retire(session)
      throw error
    }
  }

  /**
   * An election's proclaim (or a read-write lock's downgrade, rwlock.ts): replaces our entry's value, only
   * while it is ours (the adapter checks its position, the fence). Run on the lock's queue of extends (the
   * core's), so no move overlaps it; the new value is kept for a later move, which writes the entry again.
   */
  async proclaim(acq: Acquisition<Id>, value: string, signal: AbortSignal): Promise<boolean> {
    const write = this.#adapter.proclaim
    if (!write)
      throw new Error('this queue keeps no election or read-write lock: its adapter cannot proclaim')
    if (acq.ended || acq.session!.lost.aborted) return false
    if (!(await raceSignal(write.call(this.#adapter, acq.entry!, value), signal))) {
      this.#acqs.markLost(acq, this.#adapter.goneReason())
      return false
    }
    acq.value = value
    return true
  }

  /** `LockBackend.abandon`: deletes whatever `req.owner` may have put, once its writes have settled. */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    this.#heads.delete(req.owner)
    const acq = this.#acqs.get(req)
    if (!acq) return
    const sessions = [...acq.on]
    // Nothing the attempt may hold counts as a loss now (we delete it ourselves), and no attempt sends
    // another write.
    acq.ended = true
    this.#acqs.stopWatching(acq)
    const cleanUp = this.#leftovers.removeAbandoned({
      sessions,
      inflight: acq.inflight,
      names: () => [...acq.names],
      removeNames: (names) => this.#adapter.removeNames(names),
      retire: (session) => this.#pool.retire(session),
      end: () => this.#acqs.end(acq),
    })
    // Given up on at the core's deadline, the clean-up still finishes on its own (an owner-safe delete).
    await raceSignal(cleanUp, signal)
  }

  /** The queue of the lock named `key` on the store. */
  queueOf(key: string): string {
    return this.#adapter.queueOf(key)
  }

  /**
   * The lock of `acq` is handed on with a token (`ResumeFacet.encode`): its lease, its own, is kept alive
   * from now on only by the renewals of its handles, and left on the store when this client closes. What
   * the token carries: the entry's name and the lease's length. Undefined when `acq` is not on a lease of
   * its own (acquired without `resumable`) or is over.
   */
  handOver(acq: Acquisition<Id>): { readonly name: string; readonly leaseMs: number } | undefined {
    const session = acq.session
    if (acq.ended || !session?.own || acq.entry === undefined) return undefined
    this.#pool.handOver(session)
    return { name: acq.entry.name, leaseMs: session.leaseMs }
  }

  /**
   * A held lock continued from its token (`ResumeFacet.decode`): our entry read back (the same position,
   * the fence), its lease kept alive from here by the new handle's renewals, its deletion watched as a
   * holder's. Undefined when the entry is gone. The core's extend that follows decides.
   */
  async resume(
    held: { readonly key: string; readonly owner: string; readonly fence: bigint; readonly name: string },
    leaseMs: number,
    signal: AbortSignal,
  ): Promise<Acquisition<Id> | undefined> {
    const adopt = this.#adapter.adopt
    if (!adopt) throw new Error('this queue cannot resume a lock: its adapter cannot adopt an entry')
    const queue = this.#adapter.queueOf(held.key)
    const entry: OwnEntry = { queue, name: held.name, position: held.fence }
    const found = await raceSignal(adopt.call(this.#adapter, entry), signal)
    if (!found) return undefined
    this.#closing.signal.throwIfAborted()
    const session = this.#pool.own(leaseMs, { id: found.lease })
    // Not among this client's acquisitions by owner: the handle that resumes it is its only user.
    const acq = new Acquisition<Id>({ key: held.key, owner: held.owner, ttlMs: leaseMs }, queue)
    acq.name = held.name
    acq.names.add(held.name)
    acq.entry = entry
    acq.session = session
    this.#acqs.attach(acq, session)
    acq.lost = new AbortController()
    this.#acqs.watchHeld(acq, found.at)
    return acq
  }

  /**
   * Ends every acquisition without a loss and every wait, then revokes every lease (deleting our entries
   * with them).
   */
  async close(): Promise<void> {
    this.#closing.abort(new Error('the lock backend was closed'))
    this.#acqs.endAll()
    this.#leftovers.close()
    await this.#adapter.close()
    await this.#pool.close()
  }

  /**
   * The session of its own of a lock to be handed on (`AcquireRequest.resumable`): the one its earlier
   * attempts took while it lives, else a new one.
   */
  #ownSession(acq: Acquisition<Id>, leaseMs: number) {
    const mine = acq.session
    if (mine?.own && !mine.lost.aborted && !mine.revoked) return mine
    this.#closing.signal.throwIfAborted()
    return this.#pool.own(leaseMs)
  }

  /** The pool's session for leases of `leaseMs`; none once closed (see `#closing`). */
  #session(leaseMs: number) {
    this.#closing.signal.throwIfAborted()
    return this.#pool.session(leaseMs)
  }

  /**
   * The queue around our entry. After a wake-up (`seen`: the deletion it told of) the adapter may read
   * cheaply (etcd: a serializable read, without the quorum round of a linearizable one, which waits for
   * the next raft cycle: 3-10 ms, most of a handoff); if that read was served from a state before `seen`,
   * it is read again in full. That is enough: entries created before ours can only disappear, so none at
   * a position >= `seen` means none ever after; and ours existing then means we were first then, while our
   * lease lived. Ours vanishing later is a holder losing its entry, which its own watch reports.
   */
  async #check(
    entry: OwnEntry,
    rule: GrantRule,
    signal: AbortSignal,
    seen?: bigint,
  ): Promise<QueueState<Entry>> {
    const looksBack = rule.looksBack
    const state = await raceSignal(this.#adapter.check(entry, looksBack, seen), signal)
    if (state !== 'behind') return state
    return (await raceSignal(this.#adapter.check(entry, looksBack), signal)) as QueueState<Entry>
  }

  /**
   * Waits for the deletion `watch` reports; meanwhile, once per recheck interval, reads that `before` is
   * still there (the fallback for a watch that went silent), each such read answering the core's attempts
   * until the next (`PlacesInLine.watching`). Settles like `watch.gone`, or with undefined when a read finds the
   * entry gone: the wait then reads the line.
   */
  async #gone(
    watch: Watch,
    before: Entry,
    line: PlaceInLine<Entry>,
    acq: Acquisition<Id>,
    signal: AbortSignal,
  ) {
    const every = this.#recheck(acq.session!.leaseMs)
    const told = watch.gone.then((at) => ({ at }))
    for (;;) {
      // Jittered below the interval, so that the read is in before the one it replaces stops answering.
      // Unreferenced: a wait keeps no process alive by itself (its store's connection does).
      const stop = new AbortController()
      const due = sleep(jitter(every / 2) + every / 2, stop.signal, { ref: false }).then(() => undefined)
      const woke = await raceSignal(Promise.race([told, due]), signal).finally(() => stop.abort())
      if (woke) return woke.at
      const sentAt = now()
      if (!(await raceSignal(this.#adapter.exists(before), signal))) return undefined
      line.freshAt = sentAt
    }
  }

  /** A watch on `entry`; one still being made when we stop waiting is cancelled once it exists. */
  async #watch(entry: Entry, signal: AbortSignal): Promise<Watch> {
    const creating = this.#adapter.watch(entry)
    return await raceSignal(creating, signal).catch((error: unknown) => {
      creating.then((watch) => watch.cancel()).catch(() => {})
      throw error
    })
  }

  /**
   * The grant of an acquisition whose entry is first in line. Its lease is what remains of the session's
   * from `since`, a moment no earlier than the core's attempt start (validity counts from there), so the
   * lock's validity ends before the store could expire the session's lease and our entry with it. A full
   * ttl would outlast the lease by up to a keep-alive interval when the holder dies right after the grant
   * (the chaos suite's S7 found that). Granting again (a hand-over the core did not take, then a retry
   * that finds us first) gives the same lock: one watch, one `lost` signal.
   */
  #grantOf(acq: Acquisition<Id>, since: number): AttemptResult {
    // Ended meanwhile (its entry found gone by a concurrent wait): a stale "first in line" is no grant.
    if (acq.ended) return BUSY
    const session = acq.session!
    const entry = acq.entry!
    if (!acq.lost) {
      acq.lost = new AbortController()
      this.#acqs.watchHeld(acq, entry.position)
      this.#adapter.admitted?.(entry)
    }
    return {
      granted: true,
      fence: entry.position,
      ttlMs: Math.min(session.leaseMs, session.aliveUntil - since),
      cookie: acq,
      lost: acq.lost.signal,
    }
  }

  /** Same or shorter lease: one keep-alive of the entry's session, beside a read that our entry is still there. */
  async #renew(acq: Acquisition<Id>, start: number, signal: AbortSignal): Promise<ExtendResult> {
    const session = acq.session!
    const [alive, found] = await raceSignal(
      Promise.all([this.#pool.keepAlive(session), this.#adapter.read(acq.entry!)]),
      signal,
    )
    if (!alive || !found.mine) {
      this.#acqs.markLost(acq, this.#adapter.goneReason())
      return BUSY_EXTEND
    }
    // A watch that the store cancelled (or that never came back) is made again from this read.
    this.#acqs.rewatch(acq, found)
    // The lease the store keeps from the extend's start: at least a ttl from the keep-alive sent after it.
    // While a move is unconfirmed the entry may be on either lease: the shorter-lived one counts.
    let until = session.aliveUntil
    for (const other of acq.on) if (!other.lost.aborted) until = Math.min(until, other.aliveUntil)
    return { renewed: true, ttlMs: until - start }
  }

  /**
   * A longer lease: our entry moves to the session of that length, conditionally on it still being ours,
   * keeping its position (the fence and our place in line). Both sessions count us until the move is
   * confirmed: a reply lost after the store applied it leaves the entry on the new lease, which must not
   * be retired under it.
   */
  async #move(
    acq: Acquisition<Id>,
    leaseMs: number,
    start: number,
    signal: AbortSignal,
  ): Promise<ExtendResult> {
    const to = this.#session(leaseMs)
    this.#acqs.attach(acq, to)
    const lease = await raceSignal(to.id, signal)
    // As in an acquire: a lease not known to last the new ttl is kept alive in the same moment.
    const refresh = this.#pool.refresh(to, leaseMs)
    // Only onto a lease known to last as long as the one we are on (whose end bounds the validity the core
    // counts): a move that lands with its reply lost leaves the core counting that validity, and our entry
    // must outlive it. A fresh lease does; one whose keep-alives went unanswered may not: first its refresh.
    const from = acq.session!
    if (to.aliveUntil < from.aliveUntil && refresh) await this.#pool.settle(refresh, signal)
    if (to.aliveUntil < from.aliveUntil) {
      throw new Error(
        `the lease of ${leaseMs} ms to move the entry to is not known to outlive its current one ` +
          '(its keep-alive went unanswered); the entry stays where it is',
      )
    }
    if (!(await raceSignal(this.#adapter.move!(acq.entry!, acq.value, lease), signal))) {
      this.#acqs.markLost(acq, this.#adapter.goneReason())
      return BUSY_EXTEND
    }
    if (acq.ended) return BUSY_EXTEND
    acq.session = to
    // Confirmed on `to`: no other lease carries our entry (an earlier unconfirmed move's included).
    for (const other of [...acq.on]) if (other !== to) this.#acqs.detach(acq, other)
    if (refresh) await this.#pool.settle(refresh, signal)
    return { renewed: true, ttlMs: Math.min(leaseMs, to.aliveUntil - start) }
  }
}

const BUSY_EXTEND = { renewed: false } as const
