/**
 * Read-write locks on the memory backend: per name, one line of entries in arrival order, each a reader
 * or a writer, granted (with a lease end) or waiting (with a place kept until it asks again). A reader is
 * granted when no writer is ahead of it, a writer when it is first; the granted entries are always a
 * prefix of the line. Downgrade turns a writer's own entry into a reader's, in its place.
 *
 * Fences come from a counter per name, kept for the life of the process (as the mutex's): a writer takes
 * the next value; a reader takes the read epoch, a value taken by the first reader after a writer's grant
 * and shared by the readers that follow until the next writer's grant.
 */
import {
  type AcquireRequest,
  type AttemptResult,
  type HeldLease,
  type LockInfo,
  placeKeptMs,
  type RwLockFacet,
  type RwLockInfo,
  type RwLockMode,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { type Wakeups, waitOn, wakeAll } from './wakeups.js'

interface Entry {
  readonly owner: string
  mode: RwLockMode
  readonly holder: string | undefined
  /** Set once granted. */
  fence: bigint | undefined
  /** The lease's end once granted; the place's until then. */
  until: number
}

interface Counters {
  /** The latest fence granted. */
  latest: bigint
  /** The read epoch's fence: current while it equals `latest` (no writer granted since). */
  epoch: bigint
}

interface Store {
  readonly lines: Map<string, Entry[]>
  readonly counters: Map<string, Counters>
  readonly waiters: Wakeups
}

const stores = new Map<string, Store>()

function storeNamed(name: string): Store {
  let store = stores.get(name)
  if (!store) {
    store = { lines: new Map(), counters: new Map(), waiters: new Map() }
    stores.set(name, store)
  }
  return store
}

/** The read-write locks of the store named `name`; `id` and `capabilities` are the backend's. */
export function memoryRwLock(name: string, shell: Pick<RwLockFacet, 'id' | 'capabilities'>): RwLockFacet {
  const store = storeNamed(name)

  /** The line with its ended leases and lapsed places dropped; undefined when nobody holds or waits. */
  const current = (key: string): Entry[] | undefined => {
    const line = store.lines.get(key)
    if (!line) return undefined
    const t = now()
    const live = line.filter((entry) => entry.until > t)
    if (live.length === 0) store.lines.delete(key)
    else store.lines.set(key, live)
    return live.length === 0 ? undefined : live
  }
  const notify = (key: string): void => wakeAll(store.waiters, key)
  const ours = (lease: HeldLease): Entry | undefined =>
    current(lease.key)?.find((e) => e.owner === lease.owner && e.fence === lease.fence)
  const remove = (key: string, owner: string): boolean => {
    const line = current(key)
    const i = line?.findIndex((e) => e.owner === owner) ?? -1
    if (!line || i < 0) return false
    line.splice(i, 1)
    if (line.length === 0) store.lines.delete(key)
    notify(key)
    return true
  }
  /** The fence of a grant of `mode` now. */
  const nextFence = (key: string, mode: RwLockMode): bigint => {
    const counters = store.counters.get(key) ?? { latest: 0n, epoch: 0n }
    store.counters.set(key, counters)
    // A reader shares the epoch while no writer was granted since it began; otherwise it starts one.
    if (mode === 'read' && counters.epoch === counters.latest && counters.epoch > 0n) return counters.epoch
    counters.latest += 1n
    if (mode === 'read') counters.epoch = counters.latest
    return counters.latest
  }

  return {
    ...shell,

    async tryAcquire(req: AcquireRequest): Promise<AttemptResult> {
      const { key, owner, ttlMs, holder } = req
      const mode = req.rwlock?.mode
      if (!mode) throw new TypeError('A read-write lock acquire carries `rwlock` (its mode)')
      let line = current(key)
      if (!line) {
        line = []
        store.lines.set(key, line)
      }
      let i = line.findIndex((e) => e.owner === owner)
      const mine = line[i]
      // An earlier attempt of this acquire was granted and its reply was lost: the lease is ours.
      if (mine?.fence !== undefined) return { granted: true, fence: mine.fence, ttlMs }
      if (i < 0) {
        i = line.length
        line.push({ owner, mode, holder, fence: undefined, until: 0 })
      }
      const entry = line[i]!
      const ahead = line.slice(0, i)
      const admitted =
        mode === 'write' ? i === 0 : ahead.every((e) => e.mode === 'read' && e.fence !== undefined)
      if (admitted) {
        entry.fence = nextFence(key, mode)
        entry.until = now() + ttlMs
        // A reader behind this one may be admitted beside it: let it ask.
        if (line.length > i + 1) notify(key)
        return { granted: true, fence: entry.fence, ttlMs }
      }
      entry.until = now() + placeKeptMs(ttlMs)
      let soonest = Infinity
      for (const e of ahead) if (e.fence !== undefined) soonest = Math.min(soonest, e.until - now())
      return { granted: false, queued: true, ...(soonest < Infinity ? { retryInMs: soonest } : {}) }
    },

    async extend(lease, ttlMs) {
      const entry = ours(lease)
      if (!entry) return { renewed: false }
      entry.until = now() + ttlMs
      return { renewed: true }
    },

    async release(lease) {
      return ours(lease) !== undefined && remove(lease.key, lease.owner)
    },

    async abandon({ key, owner }) {
      // Owner-checked: only what this acquire holds or where it waits.
      remove(key, owner)
    },

    async downgrade(lease) {
      const entry = ours(lease)
      if (!entry) return { downgraded: false }
      // Already a reader: an earlier downgrade whose reply was lost.
      if (entry.mode === 'write') {
        entry.mode = 'read'
        notify(lease.key)
      }
      return { downgraded: true }
    },

    async inspect(key): Promise<LockInfo | null> {
      const line = current(key)
      const counters = store.counters.get(key)
      if (!counters) return null
      return { held: line?.some((e) => e.fence !== undefined) ?? false, fence: counters.latest }
    },

    async holders(key): Promise<RwLockInfo | null> {
      const line = current(key)
      const counters = store.counters.get(key)
      if (!line && !counters) return null
      const t = now()
      const granted = (line ?? []).filter((e) => e.fence !== undefined)
      return {
        holders: granted.map((e) => ({
          owner: e.owner,
          mode: e.mode,
          ...(e.holder === undefined ? {} : { holder: e.holder }),
          fence: e.fence,
          expiresInMs: e.until - t,
        })),
        waiting: (line?.length ?? 0) - granted.length,
        ...(counters ? { fence: counters.latest } : {}),
      }
    },

    waitForChange({ key }, signal) {
      return waitOn(store.waiters, key, signal)
    },
  }
}
