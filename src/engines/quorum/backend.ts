/**
 * How a store plugs into the quorum engine (engine.ts; Redlock): `quorumBackend` returns the backend
 * object, the mutex's leased methods forwarded to the engine, the wake-ups to its release waiting
 * (wait.ts), an operator's break to break.ts, and the store's own methods (list, doctor, close) taken as
 * given. Unlike the other engines' factories, it takes the engine built: the store's own methods read it
 * too (list every node's holds, doctor the majority and the largest ttl).
 */
import type { ElectionFacet, LockBackend, ResumeFacet } from '../../core/backend.js'
import { breakQuorumLock } from './break.js'
import type { Quorum } from './engine.js'
import { acquireOwner } from './inspect.js'
import type { ReleaseWaiting } from './wait.js'

/** What a store on the quorum engine gives beside the engine: its name and its own methods. */
export interface QuorumStore extends Required<Pick<LockBackend, 'list' | 'doctor'>> {
  /** Names the store in errors. */
  readonly id: string
  /** Leader election, where the store has one (election.ts builds it over a second quorum). */
  readonly election?: ElectionFacet
  /** Closes the nodes' connections the store opened. */
  close(): Promise<void>
}

/** Leases expire on each node's clock; a release wakes the first waiter of each node's line, not in FIFO. */
export const QUORUM_CAPABILITIES = { expiry: 'server-ttl', notify: true, fifo: false } as const

/**
 * A token carries the granting attempt's owner id on the nodes (the grant's cookie), which every node's
 * extend and release check: nothing else of this process is needed to go on with the lease.
 */
const QUORUM_RESUME: ResumeFacet = {
  encode: (lease) => lease.cookie,
  decode: async (lease) => {
    const onNodes = lease.cookie
    if (typeof onNodes !== 'string' || acquireOwner(onNodes) !== lease.owner) {
      throw new TypeError("This lock token is damaged: its Redlock owner is not the lock's. Copy it whole")
    }
    return { cookie: onNodes }
  },
}

/** The backend of a store on the quorum engine: the mutex over `quorum`, woken by `waiting`. */
export function quorumBackend(quorum: Quorum, waiting: ReleaseWaiting, store: QuorumStore): LockBackend {
  return {
    id: store.id,
    capabilities: QUORUM_CAPABILITIES,
    ...(store.election === undefined ? {} : { election: store.election }),
    tryAcquire: (request, signal) => quorum.tryAcquire(request, signal),
    extend: (lease, ttlMs, signal) => quorum.extend(lease, ttlMs, signal),
    release: (lease, signal) => quorum.release(lease, signal),
    abandon: (request, signal) => quorum.abandon(request, signal),
    inspect: (key, signal) => quorum.inspect(key, signal),
    waitForChange: (request, signal) => waiting.waitForChange(request, signal),
    list: store.list,
    breakLock: (key, options) =>
      breakQuorumLock(quorum, key, options?.fence, options?.signal ?? new AbortController().signal),
    doctor: store.doctor,
    close: () => store.close(),
    resume: QUORUM_RESUME,
    multiKeyRefusal:
      'a majority of independent nodes grants each key, and no step is atomic across nodes: a set taken on ' +
      'one node may be refused on the next, and taken apart again',
  }
}
