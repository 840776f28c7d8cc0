/**
 * How long the ZooKeeper leader keeps a session, from what our requests' answers prove: the bound every
 * lock's validity on that session counts (the lease's `aliveUntil`).
 *
 * The leader alone expires sessions: at its last touch of the session plus the negotiated timeout (rounded
 * up to a tick). It touches a session itself only when it creates it or revalidates it on a reconnection.
 * Every other request reaches it through the follower the client is connected to, which touches the session
 * in its own table and reports that table in its reply to the leader's next ping (one every half tick);
 * the leader does not touch the session when it handles a forwarded request. A read is answered by the
 * follower alone: a follower cut off from the leader answers reads (and the client's pings) for up to
 * `syncLimit` ticks while the leader expires the session. So only answers the leader took part in count
 * (a write: ours is a multi of one `check` of `/`, ordered by the leader and committed by a quorum, which
 * changes nothing), and an answer proves only what the follower had reported before it forwarded the
 * request: the leader reads a follower's ping replies and forwarded requests in the order sent on their
 * one connection, so a touch the follower reported before forwarding our request reached the leader before
 * the request did.
 *
 * The rule: an answer to a write sent at `s` proves the leader touched the session no earlier than the send
 * time of each earlier write on the same connection that was answered at least a third of the timeout
 * before `s`. In that time the follower answered at least one leader ping (the leader pings every half
 * tick, and a session lasts at least two ticks unless the server lowers `minSessionTimeout`, so half a tick
 * is at most a quarter of the timeout; the rest, a twelfth, is slack for the ping's delivery), and that
 * reply carried the earlier write's touch. A reconnection starts over (the old follower's touches may never
 * have reached the leader) except for the revalidation itself, which the leader does: a touch no earlier
 * than the disconnection.
 */
import { now } from '../../core/clock.js'

/** An answered write on the current connection, not yet known to have been reported to the leader. */
interface Answered {
  readonly sentAt: number
  readonly answeredAt: number
}

export class LeaderEvidence {
  #touched = Number.NEGATIVE_INFINITY
  #pending: Answered[] = []
  /** When the connection was lost, until a reconnection (the revalidation is a touch no earlier). */
  #disconnectedAt: number | undefined

  /** The latest moment (monotonic clock) the leader is known to have touched the session at or after. */
  get touched(): number {
    return this.#touched
  }

  /** The leader itself touched the session at or after `at` (it created it). */
  touchedAt(at: number): void {
    this.#touched = Math.max(this.#touched, at)
  }

  /** The connection is lost: what its follower had not reported yet may never reach the leader. */
  disconnected(): void {
    this.#pending = []
    this.#disconnectedAt ??= now()
  }

  /**
   * Connected again to the same session: the leader revalidated (touched) it after the disconnection.
   * Returns that moment (undefined for a first connection).
   */
  reconnected(): number | undefined {
    const at = this.#disconnectedAt
    if (at !== undefined) this.touchedAt(at)
    this.#disconnectedAt = undefined
    return at
  }

  /**
   * A write sent at `sentAt` was answered now, on a session of `timeoutMs`: the earlier writes answered a
   * third of the timeout before it count as touches from their send times. Returns until when (monotonic
   * clock) the leader is known to keep the session.
   */
  answered(sentAt: number, timeoutMs: number): number {
    const reportedBy = sentAt - timeoutMs / 3
    const left: Answered[] = []
    for (const earlier of this.#pending) {
      if (earlier.answeredAt <= reportedBy) this.touchedAt(earlier.sentAt)
      else left.push(earlier)
    }
    // Only writes answered on the connection still up count later: one after a disconnection is dropped
    // (the next `disconnected` clears the list, and this answer came before it).
    left.push({ sentAt, answeredAt: now() })
    this.#pending = left
    return this.until(timeoutMs)
  }

  /** Until when (monotonic clock) the leader is known to keep a session of `timeoutMs`. */
  until(timeoutMs: number): number {
    return this.#touched + timeoutMs
  }
}
