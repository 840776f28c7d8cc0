/**
 * memory: — locks among the clients of ONE process (tests, single-process apps, the in-process floor).
 *
 * Layout: per store, a map key → { owner, fence, holder, expiresAt } plus a fence counter per key.
 * `memory:` is the process-wide default store; `memory:NAME` (or `memoryBackend({ name })`) is a separate one.
 * Expiry: a lease ends at `expiresAt` on this process's monotonic clock; no timer is needed, since a refused
 * attempt reports the holder's remaining lease and the waiting loop sleeps no longer than that.
 * Fence: the store's per-key counter, incremented by each grant; it is never deleted (a release keeps
 * it), so fences keep increasing after releases for as long as the process lives.
 * Waiting: waiters of a key are woken in-process when it is released (or abandoned, or broken).
 * Listing walks the map; breaking deletes the entry and keeps the fence counter.
 * Limits: nothing is shared with other processes, and nothing outlives the process (fences included).
 * Keys and ttls: the core's defaults (DEFAULT_LIMITS in src/core/options.ts).
 * The folder holds this one file.
 */
import type {
  AcquireRequest,
  AttemptResult,
  BreakOptions,
  BreakResult,
  ElectionFacet,
  ExtendResult,
  HeldLease,
  ListedLock,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { type ParamSchema, readParams } from '../../core/url.js'

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
  readonly waiters: Map<string, Set<() => void>>
}

const stores = new Map<string, Store>()

function storeNamed(name: string): Store {
  let store = stores.get(name)
  if (!store) {
    store = { entries: new Map(), fences: new Map(), waiters: new Map() }
    stores.set(name, store)
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

/** What `memoryBackend` is told. */
export interface MemoryBackendOptions {
  /** Clients whose backends share a name share their locks. @default '' (the process-wide store) */
  readonly name?: string | undefined
}

/** The memory backend: it lists and breaks locks (tests of loss break leases behind their holders' backs). */
export interface MemoryBackend extends LockBackend {
  list(prefix: string): AsyncIterable<ListedLock>
  breakLock(key: string, options?: BreakOptions): Promise<BreakResult>
  readonly election: ElectionFacet & {
    /** Ends the leadership of `name` behind its leader's back (tests of loss). */
    breakLock(name: string, options?: BreakOptions): Promise<BreakResult>
  }
}

/**
 * Creates an in-process backend.
 * @example
 * const locks = createLockClient(memoryBackend({ name: 'tests' }))
 */
export function memoryBackend(options: MemoryBackendOptions = {}): MemoryBackend {
  const name = options.name ?? ''
  const id = `memory:${name}`
  const mutex = leasesOn(storeNamed(name), id, false)
  // Elections live in a store of their own: an election and a lock may share a name.
  const elections = leasesOn(storeNamed(`${name}\u0000elections`), id, true)
  return {
    ...mutex.methods,
    election: {
      ...elections.methods,
      async proclaim(lease, value) {
        const entry = elections.ours(lease)
        if (!entry) return { proclaimed: false }
        entry.value = value
        elections.notify(lease.key)
        return { proclaimed: true }
      },
      watch: (key, signal) => elections.methods.waitForChange({ key, owner: '', ttlMs: 0 }, signal),
    },
    async close() {},
  }
}

/**
 * The leased methods, listing and breaking over one store (the mutex's, or the elections'), with the two
 * helpers an election's proclaim needs: the entry a lease still holds, and waking the key's waiters.
 * `wakeOnGrant`: a grant wakes them too (an election's observers watch for a new leader; a mutex's
 * waiters have nothing to gain from it).
 */
function leasesOn(store: Store, id: string, wakeOnGrant: boolean) {
  const live = (key: string): Entry | undefined => {
    const entry = store.entries.get(key)
    if (entry && entry.expiresAt > now()) return entry
    return undefined
  }
  const notify = (key: string) => {
    const set = store.waiters.get(key)
    if (!set) return
    store.waiters.delete(key)
    for (const wake of set) wake()
  }
  const ours = (lease: HeldLease): Entry | undefined => {
    const entry = live(lease.key)
    return entry && entry.owner === lease.owner && entry.fence === lease.fence ? entry : undefined
  }

  const methods = {
    id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false } as const,

    async tryAcquire({ key, owner, ttlMs, holder, value }: AcquireRequest): Promise<AttemptResult> {
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
    },

    async extend(lease: HeldLease, ttlMs: number): Promise<ExtendResult> {
      const entry = ours(lease)
      if (!entry) return { renewed: false }
      entry.expiresAt = now() + ttlMs
      return { renewed: true }
    },

    async release(lease: HeldLease): Promise<boolean> {
      const entry = ours(lease)
      if (!entry) return false
      store.entries.delete(lease.key)
      notify(lease.key)
      return true
    },

    async inspect(key: string): Promise<LockInfo | null> {
      const entry = live(key)
      if (entry) return viewOf(entry)
      const fence = store.fences.get(key)
      return fence === undefined ? null : { held: false, fence }
    },

    async *list(prefix: string): AsyncGenerator<ListedLock> {
      // A snapshot of the keys: entries may come and go while the caller looks at each.
      for (const key of [...store.entries.keys()]) {
        const entry = key.startsWith(prefix) ? live(key) : undefined
        if (entry) yield { key, ...viewOf(entry) }
      }
    },

    waitForChange({ key }: AcquireRequest, signal: AbortSignal): Promise<void> {
      return new Promise<void>((resolve) => {
        if (signal.aborted) return resolve()
        let set = store.waiters.get(key)
        if (!set) {
          set = new Set()
          store.waiters.set(key, set)
        }
        const wake = () => {
          signal.removeEventListener('abort', wake)
          const current = store.waiters.get(key)
          current?.delete(wake)
          if (current?.size === 0) store.waiters.delete(key)
          resolve()
        }
        set.add(wake)
        signal.addEventListener('abort', wake, { once: true })
      })
    },

    async abandon({ key, owner }: AcquireRequest): Promise<void> {
      // Owner-checked: only a lease this acquire holds (an attempt whose caller gave up) is removed.
      if (store.entries.get(key)?.owner === owner && store.entries.delete(key)) notify(key)
    },

    async breakLock(key: string, options?: BreakOptions): Promise<BreakResult> {
      const entry = live(key)
      if (!entry) return { broken: false }
      const lease = { owner: entry.owner, fence: entry.fence, holder: entry.holder }
      if (options?.fence !== undefined && options.fence !== entry.fence) return { broken: false, lease }
      store.entries.delete(key)
      notify(key)
      return { broken: true, lease }
    },
  }
  return { methods, ours, notify }
}

/** memory: takes no URL parameters. */
export const PARAMS = {} as const satisfies ParamSchema

/** `memory:` or `memory:NAME`. */
export function fromUrl(url: URL): MemoryBackend {
  readParams(url, PARAMS)
  return memoryBackend({ name: decodeURIComponent(url.pathname) })
}
