/**
 * The resume facet of a lock on the queue-lock engine (`ResumeFacet`: `lock.token()`, `locks.resume`), for
 * stores whose entries can move to a lease of their own and whose leases another client can keep alive
 * (etcd; not ZooKeeper, whose ephemeral nodes die with the session that made them).
 *
 * A lock shares its session's lease with this client's other locks of its ttl, so keeping that lease alive
 * elsewhere would keep them all. Only a lock acquired `resumable` (on a lease of its own) is handed on:
 * the token carries its entry's name (which holds the owner id) and its lease's length; the process that
 * resumes it reads the entry back (same position: the fence), keeps its lease alive by its own renewals,
 * and releases it as the original would (an owner-checked delete, then the lease revoked).
 */
import type { HeldLease, ResumeFacet } from '../../core/backend.js'
import { CapabilityError, quoteKey } from '../../core/errors.js'
import type { Acquisition, QueueLock } from './engine.js'

/** What a token of a queue lock carries beside the core's fields. */
interface QueueCookie {
  /** Our entry's name: under the lock's queue, ending with the owner id. */
  readonly name: string
  /** The length of the lease it is on (ms). */
  readonly leaseMs: number
}

/**
 * The resume facet over `mutex`, the lock's queue engine on the store named `id`; a failed read is said by
 * `unavailable` ("Could not resume lock …").
 */
export function queueResume<Id, Entry>(
  mutex: QueueLock<Id, Entry>,
  id: string,
  unavailable: (key: string, what: string, error: unknown) => Error,
): ResumeFacet {
  return {
    encode: (lease) => {
      const cookie = mutex.handOver(lease.cookie as Acquisition<Id>)
      if (cookie) return cookie
      throw new CapabilityError(
        `Cannot make a token of lock ${quoteKey(lease.key)}: on ${id} a lock shares its lease with this ` +
          "client's other locks, and keeping it alive elsewhere would keep them all. Acquire it with " +
          '`{ resumable: true }` to hand it on (docs/resume.md)',
        { key: lease.key, backend: id },
      )
    },
    decode: async (lease, signal) => {
      const { name, leaseMs } = cookieOf(lease, mutex.queueOf(lease.key))
      const acq = await mutex.resume({ ...lease, name }, leaseMs, signal).catch((error: unknown) => {
        if (signal.aborted) throw signal.reason
        throw unavailable(lease.key, 'resume', error)
      })
      return acq ? { cookie: acq, lost: acq.lost?.signal } : null
    },
  }
}

/** The cookie of a token, checked: an entry of this lock's queue and owner, a lease length. */
function cookieOf(lease: HeldLease, queue: string): QueueCookie {
  const c = (typeof lease.cookie === 'object' && lease.cookie !== null ? lease.cookie : {}) as Record<
    string,
    unknown
  >
  const ours = typeof c.name === 'string' && c.name.startsWith(queue) && c.name.endsWith(`-${lease.owner}`)
  if (!ours || typeof c.leaseMs !== 'number' || !Number.isSafeInteger(c.leaseMs) || c.leaseMs <= 0) {
    throw new TypeError(
      "This lock token is damaged: its store data does not name this lock's entry and lease. Copy it whole",
    )
  }
  return { name: c.name as string, leaseMs: c.leaseMs }
}
