/**
 * A table of leases by key, the memory backend's one algorithm: per named table, a map key → { owner,
 * fence, holder, value, expiresAt }, a fence counter per key (never deleted: fences keep increasing after
 * releases for as long as the process lives), and the waiters of each key, woken when it is released,
 * abandoned or broken (and, for an election's observers, granted). The mutex (mutex.ts) is one table, the
 * elections (election.ts) another: a lock and an election of one name are independent.
 */
import type {
  AcquireRequest,
  AllAttemptResult,
  AttemptResult,
  BreakOptions,
  BreakResult,
  Grant,
  HeldLease,
  ListedLock,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { type Wakeups, waitOn, wakeAll } from './wakeups.js'

interface Entry {
  readonly owner: string
  readonly fence: bigint
  readonly holder: string | undefined
  /** An election leader's value; undefined on a mutex. */
  value: string | undefined
  expiresAt: number
}

interface Store {
  readonly entries: Map<string, Entry>
  readonly fences: Map<string, bigint>
  readonly waiters: Wakeups
}

/** The state of each named table, for the life of the process. */
const stores = new Map<string, Store>()

/** The table of primitive `kind` in the store named `name`: the kind first, so no two pairs share one. */
function storeNamed(kind: string, name: string): Store {
  const id = `${kind}:${name}`
  let store = stores.get(id)
  if (!store) {
    store = { entries: new Map(), fences: new Map(), waiters: new Map() }
    stores.set(id, store)
  }
  return store
}

/** `inspect`'s view of a live entry. */
function viewOf(entry: Entry): LockInfo {
  return {
    held: true,
    owner: entry.owner,
    ...(entry.holder === undefined ? {} : { holder: entry.holder }),
    fence: entry.fence,
    expiresInMs: entry.expiresAt - now(),
    ...(entry.value === undefined ? {} : { value: entry.value }),
  }
}

/** The leased methods of the backend contract over one table, with `list` and `breakLock` of it. */
export interface LeaseMethods
  extends Pick<LockBackend, 'tryAcquire' | 'extend' | 'release' | 'abandon' | 'inspect' | 'waitForChange'> {
  list(prefix: string): AsyncIterable<ListedLock>
  breakLock(key: string, options?: BreakOptions): Promise<BreakResult>
}

/** A table's methods, and what an election's proclaim needs of it: a lease's live entry, a wake-up. */
export interface LeaseTable {
  readonly methods: LeaseMethods
  /** The live entry `lease` still holds, if it does. */
  ours(lease: HeldLease): { value: string | undefined } | undefined
  /** Wakes the waiters of `key`. */
  notify(key: string): void
  /**
   * Grants every request or none, in one synchronous step (nothing else runs in between): `Busy` until
   * the last of the keys held by others is due to expire.
   */
  acquireAll(requests: readonly AcquireRequest[]): AllAttemptResult
}

/**
 * The `kind` table of the store named `name` (shared by every backend of that name in the process). `wakeOnGrant`: a grant
 * wakes the key's waiters too (an election's observers watch for a new leader; a mutex's waiters have
 * nothing to gain from it).
 */
export function leaseTable(
  kind: 'mutex' | 'election',
  name: string,
  { wakeOnGrant = false } = {},
): LeaseTable {
  const store = storeNamed(kind, name)

  const live = (key: string): Entry | undefined => {
    const entry = store.entries.get(key)
    if (entry && entry.expiresAt > now()) return entry
    return undefined
  }
  const notify = (key: string): void => wakeAll(store.waiters, key)
  const ours = (lease: HeldLease): Entry | undefined => {
    const entry = live(lease.key)
    return entry && entry.owner === lease.owner && entry.fence === lease.fence ? entry : undefined
  }

  /** One attempt, synchronous: a single acquire's, and each key's of an atomic set's. */
  const tryAcquire = ({ key, owner, ttlMs, holder, value }: AcquireRequest): AttemptResult => {
    const entry = live(key)
    if (entry) {
      if (entry.owner === owner) return { granted: true, fence: entry.fence, ttlMs }
      return { granted: false, retryInMs: entry.expiresAt - now() }
    }
    const fence = (store.fences.get(key) ?? 0n) + 1n
    store.fences.set(key, fence)
    store.entries.set(key, { owner, fence, holder, value, expiresAt: now() + ttlMs })
    if (wakeOnGrant) notify(key)
    return { granted: true, fence, ttlMs }
  }

  const acquireAll = (requests: readonly AcquireRequest[]): AllAttemptResult => {
    const busy = requests.flatMap(({ key, owner }) => {
      const entry = live(key)
      return entry && entry.owner !== owner ? [entry.expiresAt - now()] : []
    })
    if (busy.length > 0) return { granted: false, retryInMs: Math.max(...busy) }
    return { granted: true, grants: requests.map((req) => tryAcquire(req) as Grant) }
  }

  const methods: LeaseMethods = {
    tryAcquire: async (req) => tryAcquire(req),

    async extend(lease, ttlMs) {
      const entry = ours(lease)
      if (!entry) return { renewed: false }
      entry.expiresAt = now() + ttlMs
      return { renewed: true }
    },

    async release(lease) {
      const entry = ours(lease)
      if (!entry) return false
      store.entries.delete(lease.key)
      notify(lease.key)
      return true
    },

    async inspect(key): Promise<LockInfo | null> {
      const entry = live(key)
      if (entry) return viewOf(entry)
      const fence = store.fences.get(key)
      return fence === undefined ? null : { held: false, fence }
    },

    async *list(prefix) {
      // A snapshot of the keys: entries may come and go while the caller looks at each.
      for (const key of [...store.entries.keys()]) {
        const entry = key.startsWith(prefix) ? live(key) : undefined
        if (entry) yield { key, ...viewOf(entry) }
      }
    },

    waitForChange({ key }, signal) {
      return waitOn(store.waiters, key, signal)
    },

    async abandon({ key, owner }) {
      // Owner-checked: only a lease this acquire holds (an attempt whose caller gave up) is removed.
      if (store.entries.get(key)?.owner === owner && store.entries.delete(key)) notify(key)
    },

    async breakLock(key, options) {
      const entry = live(key)
      if (!entry) return { broken: false }
      const lease = { owner: entry.owner, fence: entry.fence, holder: entry.holder }
      if (options?.fence !== undefined && options.fence !== entry.fence) return { broken: false, lease }
      store.entries.delete(key)
      notify(key)
      return { broken: true, lease }
    },
  }
  return { methods, ours, notify, acquireAll }
}
