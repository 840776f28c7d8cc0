/**
 * What this process has seen of each lock record, for the `cas-lease` engine: the version, since when it
 * has been seen unchanged (on our monotonic clock), and when to read it next. One entry per key, shared by
 * every acquire of this process (they all wait for the same record), in a bounded map: forgetting an
 * entry only restarts an observation, which delays a takeover and never hastens one.
 *
 * When an observation starts: AFTER the read that returned the version came back, never when the read
 * was sent. The holder counts its validity from before it sent the write that made this version, so that
 * write was sent before it was applied, which was before our read was served, which was before our read
 * returned: `holder's start <= write applied <= read served <= read returned`. Counting from the return
 * is therefore never earlier than the holder's own start, and a lease (plus a margin) from there ends no
 * sooner than the holder's validity, whatever the round trip took. Counting from the send would be
 * unsafe: a read sent before a renewal and served after it would start the count before the holder did.
 * (amazon-dynamodb-lock-client takes its lookup time after the call returns, for the same reason.)
 *
 * Why every waiter of the process may count from the same `since`, also one that came long after it,
 * and one that joined a read another waiter sent (reads.ts): the chain above links `since` to the
 * HOLDER's start and to nothing about the waiter. Whoever asked for the read, `since` is a moment of
 * this process's monotonic clock after the version was written, so every waiter of this process (one
 * clock) may take over at `since` + lease + margin: the holder of that version cannot count on it past
 * then, and if it renewed meanwhile, the takeover, conditioned on the version observed, is refused.
 * When the waiter started, or which read it joined, adds nothing the chain needs: counting only from
 * one's own first read would be safe too, but only slower. Versions never come back (a fresh nonce,
 * generation or id per write), so a version seen twice was the record all along in between. On a store
 * whose reads lag its writes, a read may show a version already replaced: it was still written before
 * that read was served, so the chain holds, and the takeover it allows is refused by the store, whose
 * conditions are checked on the record itself (`lagging` below spaces such refusals).
 */
import { BoundedMap } from '../../core/bounded-map.js'
import type { CasRecord } from './record.js'

/** Keys whose observations and write times we keep; beyond it the oldest are forgotten (see above). */
const KEYS_KEPT = 10_000
/** The first poll of a record held by someone else; it doubles while the record stays held. */
export const POLL_FIRST_MS = 100

export interface Observation {
  readonly version: string
  /** The record at that version; undefined when it is unreadable (not one of ours). */
  readonly record: CasRecord | undefined
  /** When this process first saw this version: after the read that returned it came back. */
  readonly since: number
  /** When the latest read of it returned. */
  readonly readAt: number
  /** No read of this key before then (the poll's pace); capped by when a takeover becomes possible. */
  readonly nextReadAt: number
  /** The poll interval that set `nextReadAt`: grows while the key stays held by others. */
  readonly pollMs: number
}

/**
 * A refused write whose re-read still showed the version it was conditioned on (undefined: no record):
 * the store's reads lag its writes. No write of the key is sent on that same version before `until`.
 */
interface Lag {
  readonly version: string | undefined
  /** The last backoff: it doubles with every such refusal, up to a cap, until a write of ours lands. */
  readonly backoffMs: number
  readonly until: number
}

export class Observations {
  readonly #seen = new BoundedMap<string, Observation>(KEYS_KEPT)
  readonly #lags = new BoundedMap<string, Lag>(KEYS_KEPT)
  /**
   * When this process last sent a write of each key, or was answered, whichever came later (for the
   * store's write rate, `minWriteIntervalMs`: write.ts says why the answer counts).
   */
  readonly #wrote = new BoundedMap<string, number>(KEYS_KEPT)

  constructor(
    /** The longest poll interval. */
    readonly pollMaxMs: number,
    /** The margin a waiter adds to a record's lease before it takes over. */
    readonly marginOf: (leaseMs: number) => number,
  ) {}

  /**
   * Records what a read (or a refusal carrying the current record) returned at `at`, just after it came
   * back; `record` is the decoded body (undefined: unreadable). Returns the observation.
   */
  saw(key: string, version: string, record: CasRecord | undefined, at: number): Observation {
    const before = this.#seen.get(key)
    const same = before?.version === version
    const since = same ? before.since : at
    // The pace keeps growing across renewals (a holder renewing is still a holder; an unreadable record
    // stays so); it starts again only after the key was seen free, where a fast next look is worth it.
    const busy = before !== undefined && before.record?.state !== 'released'
    const pollMs = busy
      ? Math.min(before.pollMs * 2, this.pollMaxMs)
      : Math.min(POLL_FIRST_MS, this.pollMaxMs)
    const nextReadAt = Math.min(at + pollMs, this.takeoverAt({ since, record }) ?? Number.POSITIVE_INFINITY)
    const seen: Observation = { version, record, since, readAt: at, nextReadAt, pollMs }
    this.#seen.renew(key, seen)
    return seen
  }

  /** The key has no record: the next attempt reads. */
  forget(key: string): void {
    this.#seen.delete(key)
  }

  /**
   * A write of ours may have changed the record behind our back (it threw): the next attempt reads
   * before deciding anything. The observation itself stands: if that read returns the same version, it
   * has been unchanged since we first saw it all the same.
   */
  stale(key: string): void {
    const seen = this.#seen.get(key)
    if (seen) this.#seen.set(key, { ...seen, nextReadAt: Number.NEGATIVE_INFINITY })
  }

  get(key: string): Observation | undefined {
    return this.#seen.get(key)
  }

  /**
   * When a waiter may take over the held record of `seen`: after a whole lease plus the margin of
   * observing that same version unchanged. Undefined when it is not held, or unreadable (never taken
   * over: its fence is unknown).
   */
  takeoverAt(seen: Pick<Observation, 'since' | 'record'>): number | undefined {
    const record = seen.record
    if (record?.state !== 'held') return undefined
    return seen.since + record.leaseMs + this.marginOf(record.leaseMs)
  }

  /**
   * A write conditioned on `version` was refused, and the read behind the refusal showed that very
   * version again: this store's reads lag its writes (a store without read-after-write consistency, a
   * caching proxy). Writing again on what the next read shows would only be refused again, as fast as
   * the round trips allow (hundreds per second), so writes on that version back off: 100 ms, doubling
   * with every such refusal up to `capMs`. Returns when a write on it may go again.
   */
  lagging(key: string, version: string | undefined, capMs: number, at: number): number {
    const before = this.#lags.get(key)
    const backoffMs = before ? Math.min(before.backoffMs * 2, capMs) : Math.min(POLL_FIRST_MS, capMs)
    const until = at + backoffMs
    this.#lags.renew(key, { version, backoffMs, until })
    return until
  }

  /**
   * Until when a write of `key` on `version` (undefined: a create) waits for a lagging store; undefined
   * when it need not. A read showing another version is news, so only the version refused is held back.
   */
  laggingUntil(key: string, version: string | undefined, at: number): number | undefined {
    const lag = this.#lags.get(key)
    return lag !== undefined && lag.version === version && at < lag.until ? lag.until : undefined
  }

  /** A write of ours on `key` landed: its reads caught up, the backoff starts again from the first step. */
  landed(key: string): void {
    this.#lags.delete(key)
  }

  /** Notes that a write of `key` is being sent, or was answered, at `at`; the latest time stays. */
  writing(key: string, at: number): void {
    this.#wrote.renew(key, Math.max(at, this.#wrote.get(key) ?? at))
  }

  /** When this process last sent or was answered a write of `key`, if it remembers. */
  lastWrite(key: string): number | undefined {
    return this.#wrote.get(key)
  }
}
