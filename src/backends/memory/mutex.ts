/**
 * The mutex of the memory backend: per named store, a map key → { owner, fence, holder, expiresAt }, a
 * fence counter per key (never deleted: fences keep increasing after releases for as long as the process
 * lives), and the waiters of each key, woken when it is released, abandoned or broken. Another primitive
 * (an election, a semaphore) is a module beside this one with its own per-name state, plus one line in
 * the shell (index.ts): nothing here changes.
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

/** The mutex state of each named store (`memory:NAME`), for the life of the process. */
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

/** The mutex's methods of the backend contract, and the memory backend's `list` and `breakLock` of it. */
export interface MemoryMutex
  extends Pick<LockBackend, 'tryAcquire' | 'extend' | 'release' | 'abandon' | 'inspect' | 'waitForChange'> {
  list(prefix: string): AsyncIterable<ListedLock>
  breakLock(key: string, options?: BreakOptions): Promise<BreakResult>
}

/** The mutex of the store named `name` (shared by every backend of that name in the process). */
export function memoryMutex(name: string): MemoryMutex {
  const store = storeNamed(name)

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
  }
}
