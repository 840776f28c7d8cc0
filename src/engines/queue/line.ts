/**
 * What the queue-lock engine (engine.ts) knows of each acquisition's place in line between its reads,
 * so that a wait and the attempts made meanwhile read the store no more than they must:
 *
 * - the entry ours waits for (the grant rule's; for a mutex, the one before ours) as the latest read found
 *   it (the enqueue reads it on etcd and ZooKeeper): a wait watches it without reading first. Still there,
 *   it is still the one to wait for (no entry is ever created before an existing one); gone, the read
 *   after the watch says so, and the wait reads the queue.
 * - the latest read that found that entry still there while a wait's watch on it was in place: until the
 *   wait's next such read is due (`recheckMs`), it answers the core's attempts (its re-attempt right after
 *   arming the wait, its polls about once a second), which then send nothing (`watching`). The wait's own
 *   reads, one per `recheckMs`, are the fallback for a watch that went silent: an idle waiter costs the
 *   store one read per recheck interval instead of one per poll of the core.
 * - the locks whose latest enqueue by this client found them held: the next acquire of one sends no
 *   keep-alive beside its write (engine.ts, `attempt`).
 */
import { raceSignal } from '../../core/abort.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { now } from '../../core/clock.js'
import type { Acquisition } from './acquisition.js'

/**
 * How long an attempt waits for the wait's first read after its watch is in place (on its way), before it
 * reads the store itself: a watch that is never set up (a stream that hangs) must not hold up the attempts.
 */
const WATCH_SETUP_WAIT_MS = 100

/**
 * How long a waiter goes without reading the line itself while its watch listens: its lease (how long a
 * dead holder of the same ttl keeps the lock anyway), at least 15 s (an idle waiter then costs the store
 * under 0.1 request a second) and at most 60 s. The watch on the entry before ours brings its turn; this
 * read only bounds how long a watch that went silent (a notification that never comes) can delay it.
 */
export const recheckMs = (leaseMs: number): number => Math.min(Math.max(leaseMs, 15_000), 60_000)

/**
 * How much longer than its recheck interval a wait's latest read answers the attempts: its next read is
 * sent a little before the interval ends (jittered) and takes a round trip; a loaded event loop that fires
 * it late makes the attempts read for themselves meanwhile, as they did before the wait began.
 */
const TRUST_SLACK_MS = 2000

/** How many locks are remembered as found held at this client's latest enqueue (the oldest forgotten first). */
const FOUND_HELD_KEPT = 1024

/** What an acquisition in line knows of the entry before its own. */
export interface PlaceInLine<Entry> {
  /**
   * The entry ahead of ours a wait waits for, as the latest read found it (the grant rule's: for a mutex,
   * the newest before ours); undefined when not known.
   */
  before: Entry | undefined
  /**
   * While a wait watches that entry: settles with the send time (monotonic) of the read that found it
   * still there after the watch was in place, or with undefined (gone, the watch failed, the wait ended).
   * Cleared once the watch reports a deletion.
   */
  watched: Promise<number | undefined> | undefined
  /** The send time of the wait's latest read that found that entry still there, its watch in place. */
  freshAt: number | undefined
}

export class PlacesInLine<Id, Entry> {
  readonly #lines = new WeakMap<Acquisition<Id>, PlaceInLine<Entry>>()
  /** The locks (queues) whose latest enqueue by this client found them held. */
  readonly foundHeld = new BoundedMap<string, true>(FOUND_HELD_KEPT)

  /** What `acq` knows of its place in line (made at its first use). */
  of(acq: Acquisition<Id>): PlaceInLine<Entry> {
    let line = this.#lines.get(acq)
    if (!line) {
      line = { before: undefined, watched: undefined, freshAt: undefined }
      this.#lines.set(acq, line)
    }
    return line
  }

  /**
   * Whether a wait of `acq` watches the entry before ours, found still there by a read sent after its
   * watch was in place, less than `trustMs` ago (see `trustFor`; waiting a moment for the wait's first
   * read if it is on its way), with no deletion reported since: then that read answers an attempt, which
   * sends none (it is refused). The first such read came after the attempt that armed the wait, which is
   * exactly what the core's re-attempt after arming checks; and the core's polls are a fallback for a
   * watch that went silent, which the wait's own reads, one per recheck interval, cover already. An
   * attempt after a read older than that reads for itself.
   */
  async watching(acq: Acquisition<Id>, trustMs: number, signal: AbortSignal): Promise<boolean> {
    const line = this.#lines.get(acq)
    const watched = line?.watched
    if (!line || !watched) return false
    // Waited for WATCH_SETUP_WAIT_MS at most: a watch that is never set up (a stream that hangs) must not
    // hold up the attempts, which then read the store themselves, as before the wait began.
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), WATCH_SETUP_WAIT_MS)
    })
    const sentAt = await raceSignal(Promise.race([watched, late]), signal).finally(() => clearTimeout(timer))
    const freshAt = line.freshAt
    return (
      sentAt !== undefined && line.watched === watched && freshAt !== undefined && now() - freshAt < trustMs
    )
  }
}

/** How long a wait's latest read answers the attempts, for a waiter whose reads come every `recheckMs`. */
export const trustFor = (recheck: number): number => recheck + TRUST_SLACK_MS
