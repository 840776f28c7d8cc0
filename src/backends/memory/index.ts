/**
 * memory: — locks among the clients of ONE process (tests, single-process apps, the in-process floor).
 *
 * Layout: per store, a map key → { owner, fence, holder, expiresAt } plus a fence counter per key; the
 * store's elections in a second map of their own; its semaphores in a third (semaphore.ts: limit, leases,
 * a line of waiters, a sequence counter per name); its read-write locks in a fourth (rwlock.ts: a line of
 * readers and writers, a fence counter per name).
 * `memory:` is the process-wide default store; `memory:NAME` (or `memoryBackend({ name })`) is a separate one.
 * Expiry: a lease ends at `expiresAt` on this process's monotonic clock; no timer is needed, since a refused
 * attempt reports the holder's remaining lease and the waiting loop sleeps no longer than that.
 * Fence: the store's per-key counter, incremented by each grant; it is never deleted (a release keeps
 * it), so fences keep increasing after releases for as long as the process lives.
 * Waiting: waiters of a key are woken in-process when it is released (or abandoned, or broken).
 * Atomic multi-key: every key checked and granted in one synchronous step of the mutex's table.
 * Listing walks the map; breaking deletes the entry and keeps the fence counter.
 * Limits: nothing is shared with other processes, and nothing outlives the process (fences included).
 * Keys and ttls: the core's defaults (DEFAULT_LIMITS in src/core/options.ts).
 * The folder: this shell wires each primitive into the backend; leases.ts is the one algorithm (a table
 * of leases by key), mutex.ts and election.ts each a table of it, semaphore.ts its own table (permits
 * per lease, a line), rwlock.ts its own (a line of readers and writers), wakeups.ts the in-process
 * notifications; another primitive is a module beside them plus one line here.
 */
import type { BreakOptions, BreakResult, ListedLock, LockBackend, RwLockFacet } from '../../core/backend.js'
import { type ParamSchema, readParams } from '../../core/url.js'
import { type MemoryElection, memoryElection } from './election.js'
import { memoryMutex } from './mutex.js'
import { memoryRwLock } from './rwlock.js'
import { memorySemaphore } from './semaphore.js'

/** What `memoryBackend` is told. */
export interface MemoryBackendOptions {
  /** Clients whose backends share a name share their locks. @default '' (the process-wide store) */
  readonly name?: string | undefined
}

/** The memory backend: it lists and breaks locks (tests of loss break leases behind their holders' backs). */
export interface MemoryBackend extends LockBackend {
  list(prefix: string): AsyncIterable<ListedLock>
  breakLock(key: string, options?: BreakOptions): Promise<BreakResult>
  readonly election: MemoryElection
  readonly rwlock: RwLockFacet
}

/**
 * Creates an in-process backend.
 * @example
 * const locks = createLockClient(memoryBackend({ name: 'tests' }))
 */
export function memoryBackend(options: MemoryBackendOptions = {}): MemoryBackend {
  const name = options.name ?? ''
  const shell = {
    id: `memory:${name}`,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false },
  } as const
  return {
    ...shell,
    ...memoryMutex(name),
    election: memoryElection(name, shell),
    semaphore: memorySemaphore(name, shell),
    rwlock: memoryRwLock(name, shell),
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
