/**
 * The state of one `acquire()` (one owner) in the queue-lock engine, from its first attempt until it is
 * released, lost or abandoned, and the bookkeeping around it: which sessions count it, the watch on its
 * entry while held, and how it ends. It is the cookie of its grant.
 */
import type { AcquireRequest } from '../../core/backend.js'
import type { Session, SessionPool } from '../session/pool.js'
import type { Cancel, OwnEntry, QueueAdapter } from './adapter.js'

export class Acquisition<Id> {
  readonly owner: string
  /**
   * Our entry's value: "<owner> <description>", or the owner alone (see `AcquireRequest.holder`); an
   * election's is the candidate's value (`QueueAdapter.entryValue`), replaced by each proclaim.
   */
  value: string
  /** The lock's name as the user gave it (for messages) and its queue on the store. */
  readonly key: string
  readonly queue: string
  /** Every name an attempt may have put (a new one only if a session was lost between attempts). */
  readonly names = new Set<string>()
  /** The name the latest attempt puts. */
  name: string | undefined
  /** Our entry, once a reply told us its position (the fence). */
  entry: OwnEntry | undefined
  /** The session our entry is on (or goes to, once the attempt's write lands). */
  session: Session<Acquisition<Id>, Id> | undefined
  /** Sessions whose lease may carry our entry; each counts this acquisition as a user. Usually one. */
  readonly on = new Set<Session<Acquisition<Id>, Id>>()
  /** The attempts' writes, settled or not: abandon waits for them before deleting by name. */
  inflight: Promise<unknown> | undefined
  /** Made at the first grant: aborts when our entry is deleted or its session ends (`Grant.lost`). */
  lost: AbortController | undefined
  /** The watch on our own entry while held. */
  watch: Cancel | undefined
  /** Released, lost or abandoned: a late watch event or grant means nothing any more. */
  ended = false
  /**
   * When the latest attempt began (monotonic clock): the core counts a hand-over's validity from its own
   * start of that attempt, which came just before, so the lease a hand-over reports counts from here.
   */
  attemptedAt = Number.NEGATIVE_INFINITY

  constructor(req: AcquireRequest, queue: string, value?: string) {
    this.owner = req.owner
    this.value = value ?? (req.holder === undefined ? req.owner : `${req.owner} ${req.holder}`)
    this.key = req.key
    this.queue = queue
  }
}

/**
 * Runs `work` once a grant in hand has reached its caller: after the promise callbacks that carry it there
 * (they all run first), so that the bookkeeping of a grant (setting the holder's watch, cancelling the
 * watch that woke a waiter) is not on its way. Measured on etcd with eight clients in one process, whose
 * hand-overs are CPU-bound, each of those took a tenth of a millisecond or more.
 */
export const afterGrant = (work: () => void): void => void setImmediate(work)

/**
 * Who an acquisition is among a client's: its owner and key. One owner is one acquire, of one key, except
 * an atomic set's (atomic.ts), whose keys share their acquire's owner.
 */
const idOf = (owner: string, key: string) => `${key}\n${owner}`

/** The acquisitions of one client, by owner and key, and what happens to them. */
export class Acquisitions<Id, Entry> {
  readonly #byId = new Map<string, Acquisition<Id>>()
  readonly #adapter: QueueAdapter<Id, Entry>
  readonly #pool: SessionPool<Acquisition<Id>, Id>

  constructor(adapter: QueueAdapter<Id, Entry>, pool: SessionPool<Acquisition<Id>, Id>) {
    this.#adapter = adapter
    this.#pool = pool
  }

  get(req: Pick<AcquireRequest, 'owner' | 'key'>): Acquisition<Id> | undefined {
    return this.#byId.get(idOf(req.owner, req.key))
  }

  /** The acquisition of `req.owner`, made at its first attempt. */
  of(req: AcquireRequest): Acquisition<Id> {
    const existing = this.get(req)
    if (existing && !existing.ended) return existing
    const acq = new Acquisition<Id>(req, this.#adapter.queueOf(req.key), this.#adapter.entryValue?.(req))
    this.#byId.set(idOf(req.owner, req.key), acq)
    return acq
  }

  /** Counts `acq` on `session` (once): the session stays while our entry may be on its lease. */
  attach(acq: Acquisition<Id>, session: Session<Acquisition<Id>, Id>): void {
    if (acq.on.has(session)) return
    acq.on.add(session)
    this.#pool.use(session, acq)
  }

  detach(acq: Acquisition<Id>, session: Session<Acquisition<Id>, Id>): void {
    if (acq.on.delete(session)) this.#pool.leave(session, acq)
  }

  stopWatching(acq: Acquisition<Id>): void {
    const watch = acq.watch
    acq.watch = undefined
    // Not awaited: a cancel is a message on a shared stream; a release need not wait for it.
    watch?.cancel()
  }

  /** Nothing more to do for this acquisition: its entry is gone, released, or being deleted by us. */
  end(acq: Acquisition<Id>): void {
    acq.ended = true
    this.stopWatching(acq)
    if (this.get(acq) === acq) this.#byId.delete(idOf(acq.owner, acq.key))
    for (const session of [...acq.on]) this.detach(acq, session)
  }

  /** Our entry went behind our back: tell the holder (the core aborts lock.signal) and stop counting it. */
  markLost(acq: Acquisition<Id>, reason: string): void {
    if (acq.ended) return
    acq.lost?.abort(new Error(reason))
    this.end(acq)
  }

  /**
   * The session's lease is gone, and our entries on it with it. Waiters hear of it through session.lost
   * (their next attempt puts a new entry); holders whose entry is known to be on it lose their lock now.
   * (An entry whose move to another lease is unconfirmed may be on either: its own watch tells.)
   */
  sessionLost(session: Session<Acquisition<Id>, Id>, reason: Error): void {
    for (const acq of [...session.users])
      if (acq.lost && acq.session === session) this.markLost(acq, reason.message)
  }

  /**
   * Watches our own entry while held, from just after `from`: no deletion after that is missed, so the
   * watch is set once the grant has reached its caller (`afterGrant`), never waited for. If the store ends
   * the watch, our entry is read once and watched again from there; if even that read fails, the next
   * renewal reads and watches again.
   */
  watchHeld(acq: Acquisition<Id>, from: bigint): void {
    const entry = acq.entry!
    let inner: Cancel | undefined
    let stopped = false
    // In place at once (a release or a loss before the watch is set stops it from being set at all).
    const watch: Cancel = {
      cancel: () => {
        stopped = true
        inner?.cancel()
      },
    }
    acq.watch = watch
    afterGrant(() => {
      if (stopped || acq.watch !== watch) return
      inner = this.#adapter.watchHeld(entry, from, {
        deleted: (reason) => {
          if (acq.watch === watch) this.markLost(acq, reason)
        },
        failed: () => {
          if (acq.watch !== watch) return
          acq.watch = undefined
          this.#adapter.read(entry).then(
            (found) => this.rewatch(acq, found),
            () => {},
          )
        },
      })
    })
  }

  /** After a read of our entry at `found.at`: lost if it is gone, else watched from there if it is not. */
  rewatch(acq: Acquisition<Id>, found: { readonly mine: boolean; readonly at: bigint }): void {
    if (acq.ended || !acq.lost) return
    if (!found.mine) {
      this.markLost(acq, this.#adapter.goneReason(found.at))
      return
    }
    if (!acq.watch) this.watchHeld(acq, found.at)
  }

  /** Ends every acquisition without a loss (closing: our own revokes delete our entries). */
  endAll(): void {
    for (const acq of this.#byId.values()) {
      acq.ended = true
      this.stopWatching(acq)
    }
    this.#byId.clear()
  }
}
