/**
 * Sessions: one etcd lease per lease length, kept alive by the etcd3 client while something may have a
 * key on it, and revoked once nothing has for a while.
 *
 * - A session counts its users: acquires under way (their write may be landing), waiters in line and
 *   holders. Each user is counted once per session its key may be on (two while a key moves between
 *   leases, see the backend's extend).
 * - Idle retirement: a session without users for `idleMs(ttl)` is revoked and dropped, so a client that
 *   used a hundred ttls keeps a hundred leases alive only while it uses them.
 * - A session whose lease etcd says is gone, or whose clean-up failed (a key we could not delete may
 *   still be on its lease), takes no new users: it is revoked as soon as its last user leaves, which
 *   deletes whatever was left on it (or, if etcd stays unreachable, the lease is no longer kept alive
 *   and expires after its ttl).
 * - `aliveUntil` is what etcd is known to keep: a lock on a session is never valid beyond it.
 */
import type { Etcd3, Lease } from 'etcd3'
import { now } from '../../core/clock.js'
import { causeText } from '../../core/errors.js'

export interface Session<User> {
  readonly ttlS: number
  readonly lease: Lease
  /** The lease id, in hex (as Go writes it into key names) and as etcd's decimal string. */
  readonly id: Promise<{ hex: string; decimal: string }>
  /** Aborts when etcd3 says the lease is gone (revoked, expired, or never granted). */
  readonly lost: AbortController
  /**
   * Until when (our monotonic clock) etcd keeps the lease at least: the send time of the latest
   * acknowledged grant or keep-alive plus the TTL etcd answered with. A lock on this lease is valid no
   * longer than that, whatever its ttl: the key goes with the lease.
   */
  aliveUntil: number
  /** Whatever may have a key on this lease that we still count on. */
  readonly users: Set<User>
}

export interface SessionPool<User> {
  /** The session for leases of `ttlS` seconds (granted on first use, replaced once lost or retiring). */
  session(ttlS: number): Session<User>
  /** Counts `user` on `session`. Call it in the same turn as `session()`, before any await. */
  use(session: Session<User>, user: User): void
  /** Stops counting `user`; an idle session is retired after a while (at once if it is retiring already). */
  leave(session: Session<User>, user: User): void
  /** No new user gets this session: it is revoked once its last user leaves. */
  retire(session: Session<User>): void
  /** One keep-alive now; true if etcd still has the lease (and aliveUntil moved). */
  keepAlive(session: Session<User>): Promise<boolean>
  /** Revokes every lease (deleting every key still on one). */
  close(): Promise<void>
}

/**
 * How long a session may sit without users before it is revoked: one ttl, between 2 s and 30 s.
 *
 * A lock taken again within about a ttl of its release (a periodic job, a retry loop, a queue of short
 * jobs) reuses the lease instead of paying a grant (a raft write, fsynced) and later a revoke (another)
 * each time; an idle lease costs only a keep-alive every ttl/3, answered by the leader without a raft
 * round, so idling one ttl costs about three of those. At least 2 s, so that bursts of 1 s locks do not
 * churn leases; at most 30 s, so that long ttls used once (an hour, a day) do not linger for that long.
 */
export const idleMs = (ttlS: number): number => Math.min(Math.max(ttlS * 1000, 2000), 30_000)

interface Entry<User> extends Session<User> {
  /** Since when it has had no user, and the timer that checks it (armed once per idle spell). */
  idleSince: number
  timer: NodeJS.Timeout | undefined
  retiring: boolean
  revoked: boolean
}

export function createSessionPool<User>(
  client: Etcd3,
  onLost: (session: Session<User>, reason: Error) => void,
): SessionPool<User> {
  /** The session new users get, per ttl. */
  const current = new Map<number, Entry<User>>()
  /** Every session not revoked yet (current ones and retiring ones), for close(). */
  const open = new Set<Entry<User>>()

  const revoke = (entry: Entry<User>) => {
    if (entry.revoked) return
    entry.revoked = true
    clearTimeout(entry.timer)
    if (current.get(entry.ttlS) === entry) current.delete(entry.ttlS)
    open.delete(entry)
    // Revoking closes etcd3's keep-alive first, so even a revoke that never reaches etcd ends the lease
    // (after its ttl). Nothing we count on is on it: every user has left.
    return entry.lease.revoke().catch(() => {})
  }

  /** Checks an idle session when its timer fires: revoked if still idle, else left (or re-armed). */
  const check = (entry: Entry<User>) => {
    entry.timer = undefined
    if (entry.users.size > 0 || entry.revoked) return
    const left = entry.idleSince + idleMs(entry.ttlS) - now()
    if (left > 0) {
      arm(entry, left)
      return
    }
    void revoke(entry)
  }

  // One timer per idle spell, not per lock cycle: a lock released and taken again within the idle time
  // (the common case) moves idleSince and the timer re-arms itself for the remainder when it fires.
  const arm = (entry: Entry<User>, ms: number) => {
    entry.timer = setTimeout(() => check(entry), ms)
    // An idle session never keeps the process alive.
    entry.timer.unref()
  }

  const grant = (ttlS: number): Entry<User> => {
    const grantedFrom = now()
    const lease = client.lease(ttlS)
    const entry: Entry<User> = {
      ttlS,
      lease,
      lost: new AbortController(),
      id: lease.grant().then((decimal) => ({ decimal, hex: BigInt(decimal).toString(16) })),
      aliveUntil: Number.NEGATIVE_INFINITY,
      users: new Set(),
      idleSince: now(),
      timer: undefined,
      retiring: false,
      revoked: false,
    }
    entry.id.then(
      () => {
        entry.aliveUntil = Math.max(entry.aliveUntil, grantedFrom + ttlS * 1000)
      },
      () => {},
    )
    // etcd3 keeps the lease alive every ttl/3; each acknowledged keep-alive moves aliveUntil (replies come
    // in the order the keep-alives were sent, on one stream).
    const fired: number[] = []
    lease.on('keepaliveFired', () => {
      fired.push(now())
    })
    lease.on('keepaliveSucceeded', (res: { TTL: string }) => {
      const at = fired.shift()
      if (at !== undefined) entry.aliveUntil = Math.max(entry.aliveUntil, at + Number(res.TTL) * 1000)
    })
    lease.on('keepaliveFailed', () => {
      fired.length = 0
    })
    lease.on('lost', (error: Error) => {
      if (entry.revoked) return
      // Never handed out again; revoked (a no-op on etcd by now) once its users have left.
      entry.retiring = true
      if (current.get(ttlS) === entry) current.delete(ttlS)
      const reason = new Error(`its etcd lease (session) ended: ${causeText(error, 200)}`)
      entry.lost.abort(reason)
      onLost(entry, reason)
      if (entry.users.size === 0) void revoke(entry)
    })
    current.set(ttlS, entry)
    open.add(entry)
    return entry
  }

  return {
    session(ttlS) {
      const existing = current.get(ttlS)
      if (existing && !existing.retiring && !existing.lost.signal.aborted) return existing
      return grant(ttlS)
    },

    use(session, user) {
      session.users.add(user)
    },

    leave(session, user) {
      const entry = session as Entry<User>
      if (!entry.users.delete(user) || entry.users.size > 0 || entry.revoked) return
      if (entry.retiring) {
        void revoke(entry)
        return
      }
      entry.idleSince = now()
      if (!entry.timer) arm(entry, idleMs(entry.ttlS))
    },

    retire(session) {
      const entry = session as Entry<User>
      if (entry.revoked) return
      entry.retiring = true
      if (current.get(entry.ttlS) === entry) current.delete(entry.ttlS)
      if (entry.users.size === 0) void revoke(entry)
    },

    async keepAlive(session) {
      const sentAt = now()
      const alive = await session.lease.keepaliveOnce()
      if (Number(alive.TTL) <= 0) return false
      session.aliveUntil = Math.max(session.aliveUntil, sentAt + Number(alive.TTL) * 1000)
      return true
    },

    async close() {
      // Revoking a session's lease deletes every key on it at once (what a crash would do after the ttl).
      await Promise.allSettled([...open].map((entry) => revoke(entry)))
    },
  }
}
