/**
 * How a `sql-lease` waiter learns of a release: what this process last saw of each held key (to pace its
 * re-checks), and the wake-ups of the adapter's notifications (one subscription per client) or doorbell.
 *
 * - Pacing: a key seen held by another is not asked about again by an acquire already waiting until
 *   `pollMaxMs` (1 s) after that answer, nor later than the holder's remaining lease as the server
 *   reported it: attempts in between are answered from what was seen, without a statement. So a waiter
 *   costs at most one statement per second, notifications or not, and a crashed holder's lease is
 *   re-checked the moment it can have ended.
 * - Wake one: a release frees the lock for one holder, so its news wakes ONE waiter of the key in this
 *   process (the one that has waited longest since its last wake-up), never the herd that would all ask
 *   and all but one be refused: statements per grant stay flat however many wait. That waiter asks the
 *   server; the others keep waiting for the next release, and their polls meanwhile are answered from
 *   its answer (or, when it has none within `pollMaxMs`, ask). Of the waiters whose pace ended together,
 *   the first asks and the others wait for its answer the same way.
 * - No wake-up is lost: the woken waiter keeps the wake until its attempt gets a definite answer (granted,
 *   or refused by a live holder, whose own release will be news). Leaving without one (an abort, a
 *   timeout, the store failing until it gives up: the core's `abandon`) passes the wake to the next.
 * - Notifications (`listen`): whenever they may have been missed (the subscription was just made, or made
 *   again after its connection was lost), everything seen is forgotten and every waiter wakes: a hint is
 *   only news to re-check, never a grant.
 * - A doorbell (`watch`, per key): one watch per key per process, started while the key has waiters and
 *   no wake is out; it ends at a release (or its own bound) and wakes one, and starts again once that
 *   waiter's attempt answered, so a free row is not rung again and again before someone takes it.
 * - Observers (an election's `watch`, sql-election.ts): woken by every notification of the key (an elections
 *   table notifies grants and proclaims too) and by every gap; while no subscription works, after `pollMaxMs`.
 * - A subscription that cannot be made, or does not prove itself within `listenTimeoutMs` (a
 *   transaction-pooling proxy may accept LISTEN and deliver nothing), leaves waiters on the paced poll;
 *   it is tried again after `RETRY_LISTEN_MS`.
 */
import type { DoctorFinding } from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { now, sleep } from '../../core/clock.js'
import { causeText } from '../../core/errors.js'
import type { SqlAdapter, SqlListener, SqlRow } from './adapter.js'

/** Where wake-ups come from: an adapter's notifications or doorbell (a lock table's, or semaphore.ts's). */
export type WakeSource = Pick<SqlAdapter, 'listen' | 'watch'>

/** What this process last saw of a key held by another. */
interface Seen {
  readonly owner: string
  /** When an acquire already waiting may ask the server again (monotonic ms). */
  readonly nextReadAt: number
}

/** Keys remembered; forgetting one costs a statement, never safety. */
const KEYS_KEPT = 10_000
/** After a failed subscription, the next try waits this long (waiters poll meanwhile). */
const RETRY_LISTEN_MS = 30_000

/** An acquire waiting on a key: its owner (to follow the wake it is given) and how to wake it. */
interface Waiter {
  readonly owner: string
  readonly wake: () => void
}

export class SqlWaiting {
  readonly #adapter: WakeSource
  readonly #pollMaxMs: number
  readonly #listenTimeoutMs: number
  readonly #seen = new BoundedMap<string, Seen>(KEYS_KEPT)
  /** Notifications heard per key, and gaps: see `mark`. */
  readonly #news = new BoundedMap<string, number>(KEYS_KEPT)
  #gaps = 0
  /** The waiters of each key, longest waiting first (a woken one waits again at the end). */
  readonly #waiters = new Map<string, Set<Waiter>>()
  /**
   * The owner woken by each key's latest news, until its attempt gets a definite answer. Bounded: a
   * forgotten one (an acquire that ended without telling us) costs waiters the paced poll, never safety.
   */
  readonly #woken = new BoundedMap<string, { readonly owner: string; readonly at: number }>(KEYS_KEPT)
  /** The observers of each key (`observe`): every notification of the key wakes them all. */
  readonly #observers = new Map<string, Set<() => void>>()
  /** The doorbell watch of each key being waited on (`watch` adapters), to stop when nobody waits. */
  readonly #watches = new Map<string, AbortController>()
  #listener: Promise<SqlListener | undefined> | undefined
  #listenFailedAt: number | undefined
  #listenError: unknown
  #closed = false

  constructor(adapter: WakeSource, pollMaxMs: number, listenTimeoutMs: number) {
    this.#adapter = adapter
    this.#pollMaxMs = pollMaxMs
    this.#listenTimeoutMs = listenTimeoutMs
  }

  /** Whether the adapter offers wake-ups at all (`capabilities.notify`). */
  get notifies(): boolean {
    return this.#adapter.listen !== undefined || this.#adapter.watch !== undefined
  }

  /** A refusal for `owner` answered from what was seen, when it is too soon to ask again; else undefined. */
  paced(key: string, owner: string): { granted: false; retryInMs: number } | undefined {
    // The waiter woken by news of the key asks: the others wait for its answer (see `#notified`).
    if (this.#woken.get(key)?.owner === owner) return undefined
    const seen = this.#seen.get(key)
    if (seen === undefined || seen.owner === owner) return undefined
    const left = seen.nextReadAt - now()
    if (left <= 0) {
      // This attempt asks; the other waiters of the process, whose polls all end at the same moment, wait
      // for its answer (which replaces this) instead of all asking at once.
      this.#seen.renew(key, { owner: seen.owner, nextReadAt: now() + this.#pollMaxMs })
      return undefined
    }
    // Seen held since the last news: a definite answer for a woken waiter too.
    this.#answered(key, owner)
    return { granted: false, retryInMs: left }
  }

  /**
   * What this process has heard of `key` so far: taken before a statement is sent, and handed back to
   * `busy` with its answer, which is remembered only if no news of the key arrived in between.
   */
  mark(key: string): number {
    return this.#gaps * 2 ** 32 + (this.#news.get(key) ?? 0)
  }

  /**
   * The server said `key` is held by `row`'s owner (a statement of `owner` sent at `mark`): remember when
   * to ask again. The row may lack the owner (MySQL's refusal tells only the lease left).
   */
  busy(
    key: string,
    owner: string,
    row: (Pick<SqlRow, 'remainingMs'> & { readonly owner?: string }) | undefined,
    mark: number,
  ): { granted: false; retryInMs?: number } {
    // A release notified while the statement was on its way: the answer is older than the news, and
    // remembering it would pace the next attempt past the release the waiter was just woken for. What
    // is seen now came after the news (or is the woken waiter's question): kept.
    if (mark !== this.mark(key)) return { granted: false, retryInMs: 0 }
    if (row === undefined || row.remainingMs <= 0) {
      // The statement could not tell (a row inserted after its snapshot): ask again soon (a woken
      // waiter keeps its wake until then).
      this.#seen.delete(key)
      return { granted: false }
    }
    this.#answered(key, owner)
    // The lease ends no later than `remainingMs` after this answer arrived (the server measured it
    // before sending it): re-checking then finds it ended unless renewed.
    const wait = Math.min(this.#pollMaxMs, row.remainingMs + 1)
    // No owner (the statement told only the lease left): held by another, since ours would have been granted.
    this.#seen.renew(key, { owner: row.owner ?? '', nextReadAt: now() + wait })
    return { granted: false, retryInMs: wait }
  }

  /**
   * `owner` was granted `key` for `leaseMs`: the process's other waiters are answered from that until its
   * release is news (or the lease or `pollMaxMs` ends), and its wake (if it had one) is used. Its hint, if
   * still listed, is settled now: the acquire is over, and a wake given to it would be lost.
   */
  granted(key: string, owner: string, leaseMs: number): void {
    this.#seen.renew(key, { owner, nextReadAt: now() + Math.min(this.#pollMaxMs, leaseMs) })
    this.#remove(key, owner)
    this.#answered(key, owner)
  }

  /**
   * `owner`'s acquire of `key` is over without the lock (the core's `abandon`): a wake it had not used
   * goes to the next waiter, so the release it was for is not missed.
   */
  left(key: string, owner: string): void {
    this.#remove(key, owner)
    if (this.#woken.get(key)?.owner !== owner) return
    this.#woken.delete(key)
    this.#wakeOne(key)
    this.#watchIfIdle(key)
  }

  /**
   * `LockBackend.waitForChange` for `owner`: resolves when `key` may have changed (this waiter was woken
   * by news of it, a subscription was made again) or when `signal` aborts. Without a working subscription
   * or doorbell it resolves only on abort: the core's poll, paced above, does the work.
   */
  async waitForChange(key: string, owner: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted || this.#closed) return
    const doorbell = this.#adapter.listen === undefined
    if (!doorbell) void this.#subscribe()
    await new Promise<void>((resolve) => {
      let set = this.#waiters.get(key)
      if (set === undefined) {
        set = new Set()
        this.#waiters.set(key, set)
      }
      const waiters = set
      const waiter: Waiter = {
        owner,
        wake: () => {
          signal.removeEventListener('abort', waiter.wake)
          waiters.delete(waiter)
          if (waiters.size === 0 && this.#waiters.get(key) === waiters) {
            this.#waiters.delete(key)
            // Nobody waits on the key any more: its doorbell watch is no longer needed.
            this.#watches.get(key)?.abort()
            this.#watches.delete(key)
          }
          resolve()
        },
      }
      waiters.add(waiter)
      signal.addEventListener('abort', waiter.wake, { once: true })
      if (doorbell) this.#watchIfIdle(key)
    })
  }

  /**
   * An election's observer of `key` (it holds no lease, so it takes no part in waking one): resolves at the
   * next notification of the key, when notifications may have been missed, or when `signal` aborts; while
   * no subscription works, after `pollMaxMs` (the observer then reads at a poll's pace). Registered before
   * the subscription is asked for, so the gap its making reports wakes it too.
   */
  observe(key: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted || this.#closed) return Promise.resolve()
    return new Promise<void>((resolve) => {
      let set = this.#observers.get(key)
      if (set === undefined) {
        set = new Set()
        this.#observers.set(key, set)
      }
      const observers = set
      const wake = () => {
        signal.removeEventListener('abort', wake)
        observers.delete(wake)
        if (observers.size === 0 && this.#observers.get(key) === observers) this.#observers.delete(key)
        resolve()
      }
      observers.add(wake)
      signal.addEventListener('abort', wake, { once: true })
      void this.#subscribe().then((listener) => {
        if (listener === undefined) void sleep(this.#pollMaxMs, signal).then(wake)
      })
    })
  }

  /** Wakes every observer of `key` (or of every key). */
  #wakeObservers(key?: string): void {
    const sets = key === undefined ? [...this.#observers.values()] : [this.#observers.get(key) ?? []]
    for (const set of sets) for (const wake of [...set]) wake()
  }

  /** `owner` got a definite answer for `key` (granted, or refused by a live holder): its wake is used. */
  #answered(key: string, owner: string): void {
    if (this.#woken.get(key)?.owner === owner) this.#woken.delete(key)
    this.#watchIfIdle(key)
  }

  /** Settles `owner`'s listed hints of `key`. */
  #remove(key: string, owner: string): void {
    const set = this.#waiters.get(key)
    if (set) for (const waiter of [...set]) if (waiter.owner === owner) waiter.wake()
  }

  /** Wakes the waiter of `key` that has waited longest, and lets it keep the wake until it is answered. */
  #wakeOne(key: string): void {
    const first = this.#waiters.get(key)?.values().next().value
    if (first === undefined) return
    this.#woken.set(key, { owner: first.owner, at: now() })
    first.wake()
  }

  /**
   * A doorbell adapter: watches `key` while it has waiters and no wake is out (the woken waiter's answer
   * starts it again; see the header), or the wake is older than `pollMaxMs` (an acquire that ended
   * without telling us: any waiter's next answer starts it then). The adapter's watch never rejects; one
   * that did is taken as a ring.
   */
  #watchIfIdle(key: string): void {
    const watch = this.#adapter.watch
    if (watch === undefined || this.#adapter.listen !== undefined || this.#closed) return
    if (this.#watches.has(key) || !this.#waiters.has(key)) return
    const woken = this.#woken.get(key)
    if (woken !== undefined && now() - woken.at < this.#pollMaxMs) return
    const stop = new AbortController()
    this.#watches.set(key, stop)
    const rang = () => {
      if (this.#watches.get(key) === stop) this.#watches.delete(key)
      if (!stop.signal.aborted) this.#notified(key)
    }
    watch.call(this.#adapter, key, stop.signal).then(rang, rang)
  }

  /** A release of `key` was notified (or its doorbell rang). */
  #notified = (key: string): void => {
    this.#wakeObservers(key)
    this.#news.set(key, (this.#news.get(key) ?? 0) + 1)
    this.#woken.delete(key)
    this.#wakeOne(key)
    // The woken waiter asks; the process's other waiters are answered "held" until its answer replaces
    // this (at most `pollMaxMs`), instead of each poll that comes due meanwhile asking too.
    if (this.#woken.has(key)) this.#seen.renew(key, { owner: '', nextReadAt: now() + this.#pollMaxMs })
    else this.#seen.delete(key)
    this.#watchIfIdle(key)
  }

  /** Notifications may have been missed: forget everything seen, wake every waiter. */
  #gap = (): void => {
    this.#gaps++
    this.#seen.clear()
    this.#woken.clear()
    for (const set of [...this.#waiters.values()]) for (const waiter of [...set]) waiter.wake()
    this.#wakeObservers()
  }

  /** The client's one subscription, made on first need; undefined while it cannot be made. */
  #subscribe(): Promise<SqlListener | undefined> {
    const listen = this.#adapter.listen
    if (listen === undefined || this.#closed) return Promise.resolve(undefined)
    if (this.#listener) return this.#listener
    if (this.#listenFailedAt !== undefined && now() - this.#listenFailedAt < RETRY_LISTEN_MS) {
      return Promise.resolve(undefined)
    }
    const stop = new AbortController()
    const timeout = new AbortController()
    const made = listen.call(this.#adapter, this.#notified, this.#gap, timeout.signal)
    const listener = Promise.race([
      made,
      sleep(this.#listenTimeoutMs, stop.signal).then(() => {
        const error = new Error(`no notification came back within ${this.#listenTimeoutMs} ms of subscribing`)
        timeout.abort(error)
        throw error
      }),
    ]).then(
      (l) => {
        stop.abort()
        if (this.#closed) {
          void l.close().catch(() => {})
          return undefined
        }
        this.#listenFailedAt = undefined
        // Made: whatever was released before it listened was missed.
        this.#gap()
        return l
      },
      (error: unknown) => {
        stop.abort()
        // A subscription that turns up late is given back.
        made.then((l) => l.close()).catch(() => {})
        this.#listenError = error
        this.#listenFailedAt = now()
        this.#listener = undefined
        return undefined
      },
    )
    this.#listener = listener
    return listener
  }

  /** `doctor`: whether notifications work from here (subscribes if it has not yet). */
  async doctor(): Promise<DoctorFinding[]> {
    if (this.#adapter.listen === undefined) return []
    const listener = await this.#subscribe()
    if (listener) {
      return [{ level: 'ok', message: 'notifications work: a release wakes waiters at once (LISTEN/NOTIFY)' }]
    }
    return [
      {
        level: 'warn',
        message:
          `notifications do not work from here (${causeText(this.#listenError)}): LISTEN needs a direct ` +
          'connection (not a transaction-pooling proxy such as PgBouncer). Waiters poll instead, once a ' +
          'second each: a release reaches them up to a second late',
      },
    ]
  }

  async close(): Promise<void> {
    this.#closed = true
    for (const stop of this.#watches.values()) stop.abort()
    this.#watches.clear()
    this.#gap()
    const listener = await this.#listener
    this.#listener = undefined
    await listener?.close()
  }
}
