/**
 * One conditional write of a `cas-lease` record and what it came to, decided by the record itself and
 * never by the error: the SDKs retry conditional writes on their own, so "condition failed" may mean "my
 * own earlier attempt won", and a write that threw may have been applied, or may still be. Every write
 * carries a fresh nonce; reading the record back and finding our owner AND that nonce is the proof that
 * this very write landed.
 */

import { now, sleep } from '../../core/clock.js'
import type { CasAdapter, CasVersioned, CasWrite } from './adapter.js'
import { noteClock, type ServerClock } from './fence.js'
import type { Observation, Observations } from './observe.js'
import { SharedReads } from './reads.js'
import { type CasRecord, decodeRecord, encodeRecord } from './record.js'

/**
 * How much faster our monotonic clock may run than the store's (as the waiters' margin allows between
 * processes, engine.ts): elapsed time counted towards the store's clock is cut by this share.
 */
const CLOCK_RATE_ALLOWANCE = 0.05

export type WriteOutcome =
  /** This write landed: `version` is the record's new version. */
  | { readonly kind: 'written'; readonly version: string }
  /** It did not land and never will (refused, or the record moved past its condition): the record now. */
  | {
      readonly kind: 'other'
      readonly current: CasVersioned | undefined
      readonly record: CasRecord | undefined
      /**
       * Refused, yet the read behind the refusal still showed what the write was conditioned on: the
       * store's reads lag its writes (no read-after-write consistency, a caching proxy). The engine
       * backs off rather than write again on what such reads show (observe.ts).
       */
      readonly lagging: boolean
    }
  /** It threw, and the record still matches its condition: it may land yet. `error` is the adapter's. */
  | { readonly kind: 'unknown'; readonly error: unknown }

/** One write of a transaction (`CasIo.writeAll`): `record` over `version` (undefined: a create) of `key`. */
export interface KeyWrite {
  readonly key: string
  readonly record: CasRecord
  readonly version: string | undefined
}

/** What a transaction of writes came to: all landed, none did (and none will), or unknown. */
export type AllWriteOutcome =
  /** Every write landed: `versions` are the records' new versions, in the order of the writes. */
  | { readonly kind: 'written'; readonly versions: readonly string[] }
  /** Refused as a whole: a condition failed (each record seen as it is now), or another transaction's `conflict`. */
  | { readonly kind: 'refused'; readonly conflict: boolean }
  /** It threw, and no record shows it landed: it may land yet, whole. `error` is the adapter's. */
  | { readonly kind: 'unknown'; readonly error: unknown }

/** What a conditional delete came to: gone (ours or not), another version (`current`), or unknown. */
export type DeleteOutcome =
  | { readonly kind: 'gone' }
  | { readonly kind: 'other'; readonly current: CasVersioned }
  | { readonly kind: 'unknown'; readonly error: unknown }

/** What a read returned, and the observation it made of it (undefined: no record). */
export interface ReadAnswer {
  readonly current: CasVersioned | undefined
  readonly seen: Observation | undefined
}

/** Reads and writes records for the engine, noting every version seen in `seen`. */
export class CasIo {
  /** Every read goes through here: one request per key at a time serves every caller that can use it. */
  readonly #reads: SharedReads<ReadAnswer>
  /**
   * The latest server second any answer of this process showed (undefined: none showed one). Every
   * request sent from now on is served after that answer: what settles a fence (fence.ts).
   */
  serverSecond: number | undefined
  /** When (monotonic) an answer first showed `serverSecond`: the store's clock was at least that then. */
  serverSecondSince = 0

  constructor(
    readonly adapter: CasAdapter,
    readonly seen: Observations,
  ) {
    this.#reads = new SharedReads(async (key, signal, clock) => {
      try {
        const current = await this.adapter.read(key, signal, clock)
        return { current, seen: this.#saw(key, current) }
      } finally {
        this.#heard(clock)
      }
    })
  }

  /**
   * Deletes the record of `key` if it is still at `version` (the adapter's `delete`, which must exist),
   * settled by the record as it is now when the answer does not say: a delete that threw and whose
   * version is still there may land yet (unknown); none there, it is gone.
   */
  async remove(key: string, version: string, signal: AbortSignal): Promise<DeleteOutcome> {
    let error: unknown
    this.seen.writing(key, now())
    try {
      const clock: ServerClock = {}
      try {
        if (await this.adapter.delete!(key, version, signal, clock)) {
          this.seen.forget(key)
          return { kind: 'gone' }
        }
      } finally {
        this.#heard(clock)
      }
    } catch (thrown) {
      error = thrown
    } finally {
      this.seen.writing(key, now())
    }
    this.seen.stale(key)
    let current: CasVersioned | undefined
    try {
      current = await this.read(key, signal)
    } catch (thrown) {
      return { kind: 'unknown', error: error ?? thrown }
    }
    if (current === undefined) return { kind: 'gone' }
    if (error !== undefined && current.version === version) return { kind: 'unknown', error }
    return { kind: 'other', current }
  }

  /**
   * A strongly consistent read SENT after `notBefore` (default: now), shared with every other
   * caller it can serve (reads.ts); what it returned is observed once, at its return (see
   * observe.ts). The server's clock of its answer goes to `clock` (fence.ts).
   */
  async observe(
    key: string,
    signal: AbortSignal,
    clock?: ServerClock,
    notBefore = now(),
  ): Promise<ReadAnswer> {
    const answer = await this.#reads.read(key, signal, notBefore)
    noteClock(clock, answer.seconds)
    return answer.value
  }

  /** `observe`, for its record alone: a read sent from now on. */
  async read(key: string, signal: AbortSignal, clock?: ServerClock): Promise<CasVersioned | undefined> {
    return (await this.observe(key, signal, clock)).current
  }

  /**
   * Writes `record`: a create when `version` is undefined, else a replace on `version`. `clock` gets the
   * server's clock of the write's answer (of the read behind it, when the outcome had to be read).
   */
  async write(
    key: string,
    record: CasRecord,
    version: string | undefined,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<WriteOutcome> {
    let error: unknown
    let current: CasVersioned | undefined
    try {
      // Every record names its key (`list` gives it back where the store's name for it is a hash), and
      // the store's clock it is sent after (a resume tells a live lease from an ended one by it).
      const notBeforeMs = this.storeClockFloorMs()
      const body = encodeRecord({ ...record, key, ...(notBeforeMs === undefined ? {} : { notBeforeMs }) })
      const result = await this.#send(key, body, version, signal, clock)
      if (result.ok) {
        this.seen.saw(key, result.version, record, now())
        this.seen.landed(key)
        return { kind: 'written', version: result.version }
      }
      // Refused. The store may hand back the record as it is now (DynamoDB's ALL_OLD); else we read it.
      if (result.current) this.#saw(key, result.current)
      current = result.current ?? (await this.read(key, signal, clock))
    } catch (thrown) {
      // No answer (or a refusal we could not read behind): what we saw of the key may be stale now.
      this.seen.stale(key)
      error = thrown
      try {
        current = await this.read(key, signal, clock)
      } catch {
        return { kind: 'unknown', error }
      }
    }
    const found = current === undefined ? undefined : decodeRecord(current.body)
    // Our owner and this write's nonce: this write landed (on a retry of the SDK's, or before it threw).
    if (found && found.owner === record.owner && found.nonce === record.nonce) {
      this.seen.landed(key)
      return { kind: 'written', version: current!.version }
    }
    // Thrown, and the record is still what the write was conditioned on: it may be applied later (a
    // request still in flight), so its outcome stays unknown. Once the record has moved past that
    // condition (versions never come back: every body is unique) it can never land.
    const stillPossible = version === undefined ? current === undefined : current?.version === version
    if (error !== undefined && stillPossible) return { kind: 'unknown', error }
    return { kind: 'other', current, record: found, lagging: error === undefined && stillPossible }
  }

  /**
   * Writes every record of `writes` in ONE transaction of the store (the adapter's `transact`, which must
   * exist): all or none. Its outcome, when the answer is lost, is decided by the records as `write` decides
   * one: the transaction lands whole or not at all, so every record showing our owner and its write's
   * nonce means it landed; anything else leaves it unknown (the core's clean-up of every key then makes
   * sure it never lands, or undoes it: hold.ts).
   */
  async writeAll(
    writes: readonly KeyWrite[],
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<AllWriteOutcome> {
    const notBeforeMs = this.storeClockFloorMs()
    const sent = writes.map(({ key, record, version }) => ({
      key,
      version,
      body: encodeRecord({ ...record, key, ...(notBeforeMs === undefined ? {} : { notBeforeMs }) }),
    }))
    const noteWriting = () => {
      const t = now()
      for (const { key } of writes) this.seen.writing(key, t)
    }
    noteWriting()
    const answered: ServerClock = {}
    let error: unknown
    try {
      const out = await this.adapter.transact!(sent, signal, answered)
      if (out.ok) {
        writes.forEach(({ key, record }, i) => {
          this.seen.saw(key, out.versions[i]!, record, now())
          this.seen.landed(key)
        })
        return { kind: 'written', versions: out.versions }
      }
      for (const { index, current } of out.failed) this.#saw(writes[index]!.key, current)
      return { kind: 'refused', conflict: out.conflict }
    } catch (thrown) {
      error = thrown
    } finally {
      noteWriting()
      noteClock(clock, answered.seconds)
      this.#heard(answered)
    }
    for (const { key } of writes) this.seen.stale(key)
    try {
      const found = await Promise.all(writes.map(({ key }) => this.read(key, signal, clock)))
      const landed = found.every((current, i) => {
        const record = current && decodeRecord(current.body)
        const ours = writes[i]!.record
        return record?.owner === ours.owner && record.nonce === ours.nonce
      })
      if (landed) {
        for (const { key } of writes) this.seen.landed(key)
        return { kind: 'written', versions: found.map((current) => current!.version) }
      }
    } catch {
      // Unreadable now: the outcome stays unknown.
    }
    return { kind: 'unknown', error }
  }

  /**
   * One conditional write, its times noted for the store's write rate. The rate is the server's, per
   * object, counted from when it applied the previous write, and a write may be applied any time until
   * its answer (a slow first request of a client, a congested link): the time that counts is the
   * ANSWER (or the error), the latest moment it can have been applied that we know of. Spacing from
   * the send let a renewal reach the server under `minWriteIntervalMs` after a slow create committed
   * (GCS: 429, and a renewal lost). The send is noted too, so that a write of the same key from another
   * acquire of this process, sent while this one is still unanswered, is spaced at least from its send.
   * (A write that never answers is noted when it throws: we cannot know more.)
   */
  async #send(
    key: string,
    body: string,
    version: string | undefined,
    signal: AbortSignal,
    clock: ServerClock | undefined,
  ): Promise<CasWrite> {
    this.seen.writing(key, now())
    const answered: ServerClock = {}
    try {
      return version === undefined
        ? await this.adapter.create(key, body, signal, answered)
        : await this.adapter.replace(key, body, version, signal, answered)
    } finally {
      this.seen.writing(key, now())
      noteClock(clock, answered.seconds)
      this.#heard(answered)
    }
  }

  /**
   * The store's clock now, at the least, in ms since 1970: the latest second an answer showed (the clock
   * was at least that when the answer was served, before we heard it), plus what our monotonic clock has
   * counted since we first heard it, less `CLOCK_RATE_ALLOWANCE` of that in case our clock runs fast.
   * Undefined when no answer showed a clock.
   */
  storeClockFloorMs(): number | undefined {
    if (this.serverSecond === undefined) return undefined
    const elapsed = Math.max(0, now() - this.serverSecondSince)
    return this.serverSecond * 1000 + Math.floor(elapsed * (1 - CLOCK_RATE_ALLOWANCE))
  }

  /** Notes the server second of an answer, when it is later than any seen. */
  #heard(clock: ServerClock): void {
    const { seconds } = clock
    if (seconds !== undefined && !(this.serverSecond !== undefined && this.serverSecond >= seconds)) {
      this.serverSecond = seconds
      this.serverSecondSince = now()
    }
  }

  /**
   * Waits until the store's write rate allows another write of `key` from this process (GCS: about one
   * per second per object): `minWriteIntervalMs` after our previous write of it was answered, so at
   * most that long (the answer is in the past), and only when this process writes one record again that
   * soon (a release or a next acquire right after a grant, a ttl under three intervals). Waiting for
   * the store's rate is not waiting for a holder: an attempt waits too, rather than refusing a free lock.
   * A renewal's wait is bounded by its signal too, which the core aborts when the validity ends.
   */
  async paced(key: string, signal: AbortSignal): Promise<void> {
    const wroteAt = this.seen.lastWrite(key)
    if (wroteAt === undefined) return
    const allowedAt = wroteAt + this.adapter.minWriteIntervalMs
    // A loop: a timer may fire a little before the monotonic clock reaches its end.
    while (now() < allowedAt) {
      signal.throwIfAborted()
      await sleep(allowedAt - now(), signal)
    }
    signal.throwIfAborted()
  }

  #saw(key: string, current: CasVersioned | undefined): Observation | undefined {
    if (current === undefined) {
      this.seen.forget(key)
      return undefined
    }
    return this.seen.saw(key, current.version, decodeRecord(current.body), now())
  }
}
