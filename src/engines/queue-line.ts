/**
 * What the queue-lock engine (queue-lock.ts) knows of each acquisition's place in line between its reads,
 * so that a wait and the attempts made meanwhile read the store no more than they must:
 *
 * - the entry before ours as the latest read found it (the enqueue reads it on etcd and ZooKeeper): a wait
 *   watches it without reading first. Still there, it is still the newest before ours (no entry is ever
 *   created before an existing one); gone, the read after the watch says so, and the wait reads the queue.
 * - the read that found that entry still there once a wait's watch on it was in place: for a moment it
 *   answers the core's attempts (its re-attempt right after arming the wait, its first polls), which then
 *   send nothing (`watching`).
 * - the locks whose latest enqueue by this client found them held: the next acquire of one sends no
 *   keep-alive beside its write (queue-lock.ts, `attempt`).
 */
import { raceSignal } from '../core/abort.js'
import { BoundedMap } from '../core/bounded-map.js'
import { now } from '../core/clock.js'
import type { Acquisition } from './queue-acquisition.js'

/**
 * How long the read that found the entry before ours still there, once our watch on it was in place,
 * answers the attempts made meanwhile. Short: a poll after that reads the store itself, in case the watch
 * went silent (a stream that broke and was never resumed).
 */
const WATCH_TRUSTED_MS = 100

/** How many locks are remembered as found held at this client's latest enqueue (the oldest forgotten first). */
const FOUND_HELD_KEPT = 1024

/** What an acquisition in line knows of the entry before its own. */
export interface Line<Entry> {
  /** The newest entry before ours, as the latest read found it; undefined when not known. */
  before: Entry | undefined
  /**
   * While a wait watches that entry: settles with the send time (monotonic) of the read that found it
   * still there after the watch was in place, or with undefined (gone, the watch failed, the wait ended).
   * Cleared once the watch reports a deletion.
   */
  watched: Promise<number | undefined> | undefined
}

export class Lines<Id, Entry> {
  readonly #lines = new WeakMap<Acquisition<Id>, Line<Entry>>()
  /** The locks (queues) whose latest enqueue by this client found them held. */
  readonly foundHeld = new BoundedMap<string, true>(FOUND_HELD_KEPT)

  /** What `acq` knows of its place in line (made at its first use). */
  of(acq: Acquisition<Id>): Line<Entry> {
    let line = this.#lines.get(acq)
    if (!line) {
      line = { before: undefined, watched: undefined }
      this.#lines.set(acq, line)
    }
    return line
  }

  /**
   * Whether a wait of `acq` watches the entry before ours, found still there by a read sent after its
   * watch was in place less than WATCH_TRUSTED_MS ago (waiting a moment for that read if it is on its
   * way), with no deletion reported since: then that read answers an attempt, which sends none (it is
   * refused). That read came after the attempt that armed the wait, which is exactly what the core's
   * re-attempt after arming checks; and the core's polls, 10 ms apart at first, are a fallback for a watch
   * that went silent, not news while a watch just found in place is listening. A later poll reads for
   * itself.
   */
  async watching(acq: Acquisition<Id>, signal: AbortSignal): Promise<boolean> {
    const line = this.#lines.get(acq)
    const watched = line?.watched
    if (!line || !watched) return false
    // Waited for WATCH_TRUSTED_MS at most: a watch that is never set up (a stream that hangs) must not
    // hold up the attempts, which then read the store themselves, as before the wait began.
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), WATCH_TRUSTED_MS)
    })
    const sentAt = await raceSignal(Promise.race([watched, late]), signal).finally(() => clearTimeout(timer))
    return sentAt !== undefined && line.watched === watched && now() - sentAt < WATCH_TRUSTED_MS
  }
}
