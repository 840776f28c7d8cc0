/**
 * How a `sql-lease` waiter learns of a release: what this process last saw of each held key (to pace its
 * re-checks), and the wake-ups of the dialect's notifications (one subscription per client) or doorbell.
 *
 * - Pacing: a key seen held by another is not asked about again by an acquire already waiting until
 *   `pollMaxMs` (1 s) after that answer, nor later than the holder's remaining lease as the server
 *   reported it: attempts in between are answered from what was seen, without a statement. So a waiter
 *   costs at most one statement per second, notifications or not, and a crashed holder's lease is
 *   re-checked the moment it can have ended.
 * - Notifications: a release notifies the key; its waiters wake, and what was seen of that key is
 *   forgotten so their next attempt asks the server. Whenever notifications may have been missed (the
 *   subscription was just made, or made again after its connection was lost), everything seen is
 *   forgotten and every waiter wakes: a hint is only news to re-check, never a grant.
 * - A subscription that cannot be made, or does not prove itself within `listenTimeoutMs` (a
 *   transaction-pooling proxy may accept LISTEN and deliver nothing), leaves waiters on the paced poll;
 *   it is tried again after `RETRY_LISTEN_MS`.
 */
import type { DoctorFinding } from '../core/backend.js'
import { BoundedMap } from '../core/bounded-map.js'
import { now, sleep } from '../core/clock.js'
import { causeText } from '../core/errors.js'
import type { SqlDialect, SqlListener, SqlRow } from './sql-lease-driver.js'

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

export class SqlWaiting {
  readonly #dialect: SqlDialect
  readonly #pollMaxMs: number
  readonly #listenTimeoutMs: number
  readonly #seen = new BoundedMap<string, Seen>(KEYS_KEPT)
  /** Notifications heard per key, and gaps: see `mark`. */
  readonly #news = new BoundedMap<string, number>(KEYS_KEPT)
  #gaps = 0
  /** Resolvers of the waiters of each key (notifications). */
  readonly #waiters = new Map<string, Set<() => void>>()
  #listener: Promise<SqlListener | undefined> | undefined
  #listenFailedAt: number | undefined
  #listenError: unknown
  #closed = false

  constructor(dialect: SqlDialect, pollMaxMs: number, listenTimeoutMs: number) {
    this.#dialect = dialect
    this.#pollMaxMs = pollMaxMs
    this.#listenTimeoutMs = listenTimeoutMs
  }

  /** Whether the dialect offers wake-ups at all (`capabilities.notify`). */
  get notifies(): boolean {
    return this.#dialect.listen !== undefined || this.#dialect.watch !== undefined
  }

  /** A refusal for `owner` answered from what was seen, when it is too soon to ask again; else undefined. */
  paced(key: string, owner: string): { granted: false; retryInMs: number } | undefined {
    const seen = this.#seen.get(key)
    if (seen === undefined || seen.owner === owner) return undefined
    const left = seen.nextReadAt - now()
    return left > 0 ? { granted: false, retryInMs: left } : undefined
  }

  /**
   * What this process has heard of `key` so far: taken before a statement is sent, and handed back to
   * `busy` with its answer, which is remembered only if no news of the key arrived in between.
   */
  mark(key: string): number {
    return this.#gaps * 2 ** 32 + (this.#news.get(key) ?? 0)
  }

  /**
   * The server said `key` is held by `row`'s owner (a statement sent at `mark`): remember when to ask
   * again. The row may lack the owner (MySQL's refusal tells only the lease left).
   */
  busy(
    key: string,
    row: (Pick<SqlRow, 'remainingMs'> & { readonly owner?: string }) | undefined,
    mark: number,
  ): { granted: false; retryInMs?: number } {
    // A release notified while the statement was on its way: the answer is older than the news, and
    // remembering it would pace the next attempt past the release the waiter was just woken for.
    if (mark !== this.mark(key)) {
      this.#seen.delete(key)
      return { granted: false, retryInMs: 0 }
    }
    if (row === undefined || row.remainingMs <= 0) {
      // The statement could not tell (a row inserted after its snapshot): ask again soon.
      this.#seen.delete(key)
      return { granted: false }
    }
    // The lease ends no later than `remainingMs` after this answer arrived (the server measured it
    // before sending it): re-checking then finds it ended unless renewed.
    const wait = Math.min(this.#pollMaxMs, row.remainingMs + 1)
    // No owner (the statement told only the lease left): held by another, since ours would have been granted.
    this.#seen.renew(key, { owner: row.owner ?? '', nextReadAt: now() + wait })
    return { granted: false, retryInMs: wait }
  }

  /** `key` changed under us (granted, released): nothing seen of it holds any more. */
  forget(key: string): void {
    this.#seen.delete(key)
  }

  /**
   * `LockBackend.waitForChange`: resolves when `key` may have changed (a notification, a subscription
   * made again) or when `signal` aborts. Without a working subscription it resolves only on abort: the
   * core's poll, paced above, does the work.
   */
  async waitForChange(key: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted || this.#closed) return
    const { listen, watch } = this.#dialect
    if (listen === undefined && watch !== undefined) {
      await watch.call(this.#dialect, key, signal)
      // Only a wake-up is news: the core disarms its hint (aborts) at every poll, and forgetting what was
      // seen then would send a statement at every poll, pacing or not.
      if (!signal.aborted) this.#notified(key)
      return
    }
    void this.#subscribe()
    await new Promise<void>((resolve) => {
      let set = this.#waiters.get(key)
      if (set === undefined) {
        set = new Set()
        this.#waiters.set(key, set)
      }
      const waiters = set
      const done = () => {
        signal.removeEventListener('abort', done)
        waiters.delete(done)
        if (waiters.size === 0 && this.#waiters.get(key) === waiters) this.#waiters.delete(key)
        resolve()
      }
      waiters.add(done)
      signal.addEventListener('abort', done, { once: true })
    })
  }

  /** A release of `key` was notified. */
  #notified = (key: string): void => {
    this.#news.set(key, (this.#news.get(key) ?? 0) + 1)
    this.#seen.delete(key)
    const set = this.#waiters.get(key)
    if (set) for (const wake of [...set]) wake()
  }

  /** Notifications may have been missed: forget everything seen, wake every waiter. */
  #gap = (): void => {
    this.#gaps++
    this.#seen.clear()
    for (const set of [...this.#waiters.values()]) for (const wake of [...set]) wake()
  }

  /** The client's one subscription, made on first need; undefined while it cannot be made. */
  #subscribe(): Promise<SqlListener | undefined> {
    const listen = this.#dialect.listen
    if (listen === undefined || this.#closed) return Promise.resolve(undefined)
    if (this.#listener) return this.#listener
    if (this.#listenFailedAt !== undefined && now() - this.#listenFailedAt < RETRY_LISTEN_MS) {
      return Promise.resolve(undefined)
    }
    const stop = new AbortController()
    const timeout = new AbortController()
    const made = listen.call(this.#dialect, this.#notified, this.#gap, timeout.signal)
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
    if (this.#dialect.listen === undefined) return []
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
    this.#gap()
    const listener = await this.#listener
    this.#listener = undefined
    await listener?.close()
  }
}
