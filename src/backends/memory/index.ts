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
}

/**
 * Creates an in-process backend.
 * @example
 * const locks = createLockClient(memoryBackend({ name: 'tests' }))
 */
export function memoryBackend(options: MemoryBackendOptions = {}): MemoryBackend {
  const name = options.name ?? ''
  const store = storeNamed(name)
  const id = `memory:${name}`

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

  return {
    id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false },

    async tryAcquire({ key, owner, ttlMs, holder }: AcquireRequest): Promise<AttemptResult> {
      const entry = live(key)
      if (entry) {
        if (entry.owner === owner) return { granted: true, fence: entry.fence, ttlMs }
        return { granted: false, retryInMs: entry.expiresAt - now() }
      }
      const fence = (store.fences.get(key) ?? 0n) + 1n
      store.fences.set(key, fence)
      store.entries.set(key, { owner, fence, holder, expiresAt: now() + ttlMs })
      return { granted: true, fence, ttlMs }
    },

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

    async close() {},
  }
}

/** memory: takes no URL parameters. */
export const PARAMS = {} as const satisfies ParamSchema

/** `memory:` or `memory:NAME`. */
export function fromUrl(url: URL): MemoryBackend {
  readParams(url, PARAMS)
  return memoryBackend({ name: decodeURIComponent(url.pathname) })
}
