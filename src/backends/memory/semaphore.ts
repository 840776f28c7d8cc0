/**
 * Counting semaphores on the memory backend: per semaphore name, its limit, its leases (owner → permits,
 * sequence, lease end) and a line of waiters in arrival order. A request is granted when it is first in
 * line (or the line is empty) and its permits fit under the limit beside the valid leases: strictly in
 * order, so a large request is never passed by smaller ones. The sequence counter per name is kept for
 * the life of the process, as the mutex's fences are; the rest is dropped once nothing holds or waits.
 */
import {
  type AcquireRequest,
  type AttemptResult,
  type HeldLease,
  type LockInfo,
  placeKeptMs,
  type SemaphoreFacet,
  type SemaphoreInfo,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { LimitMismatchError } from '../../core/errors.js'
import { type Wakeups, waitOn, wakeAll } from './wakeups.js'

interface Lease {
  readonly permits: number
  readonly sequence: bigint
  readonly holder: string | undefined
  expiresAt: number
}

interface Place {
  readonly owner: string
  readonly permits: number
  keptUntil: number
}

interface Sem {
  limit: number
  readonly leases: Map<string, Lease>
  /** Waiters in arrival order. */
  readonly line: Place[]
}

interface Store {
  readonly sems: Map<string, Sem>
  readonly sequences: Map<string, bigint>
  readonly waiters: Wakeups
}

const stores = new Map<string, Store>()

function storeNamed(name: string): Store {
  let store = stores.get(name)
  if (!store) {
    store = { sems: new Map(), sequences: new Map(), waiters: new Map() }
    stores.set(name, store)
  }
  return store
}

/** The semaphores of the store named `name`; `id` and `capabilities` are the backend's. */
export function memorySemaphore(
  name: string,
  shell: Pick<SemaphoreFacet, 'id' | 'capabilities'>,
): SemaphoreFacet {
  const store = storeNamed(name)

  /** The semaphore with its expired leases and lapsed places dropped; undefined when nothing is left. */
  const current = (key: string): Sem | undefined => {
    const sem = store.sems.get(key)
    if (!sem) return undefined
    const t = now()
    for (const [owner, lease] of sem.leases) if (lease.expiresAt <= t) sem.leases.delete(owner)
    for (let i = sem.line.length - 1; i >= 0; i--) if (sem.line[i]!.keptUntil <= t) sem.line.splice(i, 1)
    return sem
  }
  const forgetIfIdle = (key: string, sem: Sem): void => {
    if (sem.leases.size === 0 && sem.line.length === 0) store.sems.delete(key)
  }
  const heldOf = (sem: Sem): number => {
    let held = 0
    for (const lease of sem.leases.values()) held += lease.permits
    return held
  }
  const notify = (key: string): void => wakeAll(store.waiters, key)
  const ours = (lease: HeldLease): Lease | undefined => {
    const held = current(lease.key)?.leases.get(lease.owner)
    return held && held.sequence === lease.fence ? held : undefined
  }
  const leaveLine = (sem: Sem, owner: string): void => {
    const i = sem.line.findIndex((place) => place.owner === owner)
    if (i >= 0) sem.line.splice(i, 1)
  }

  return {
    ...shell,

    async tryAcquire(req: AcquireRequest): Promise<AttemptResult> {
      const { key, owner, ttlMs, holder } = req
      const asked = req.semaphore
      if (!asked) throw new TypeError('A semaphore acquire carries `semaphore` (its limit and permits)')
      let sem = current(key)
      if (sem && sem.limit !== asked.limit && !asked.limitCompared) {
        throw new LimitMismatchError(sem.limit, asked.limit, { key, backend: shell.id })
      }
      const mine = sem?.leases.get(owner)
      if (mine) return { granted: true, fence: mine.sequence, ttlMs }
      if (!sem) {
        sem = { limit: asked.limit, leases: new Map(), line: [] }
        store.sems.set(key, sem)
      }
      const first = sem.line[0]
      const fits = heldOf(sem) + asked.permits <= sem.limit
      if (fits && (first === undefined || first.owner === owner)) {
        leaveLine(sem, owner)
        const sequence = (store.sequences.get(key) ?? 0n) + 1n
        store.sequences.set(key, sequence)
        sem.leases.set(owner, { permits: asked.permits, sequence, holder, expiresAt: now() + ttlMs })
        // The next in line may fit beside this grant: let it ask.
        if (sem.line.length > 0) notify(key)
        return { granted: true, fence: sequence, ttlMs }
      }
      const keptUntil = now() + placeKeptMs(ttlMs)
      const place = sem.line.find((p) => p.owner === owner)
      if (place) place.keptUntil = keptUntil
      else sem.line.push({ owner, permits: asked.permits, keptUntil })
      let soonest = Infinity
      for (const lease of sem.leases.values()) soonest = Math.min(soonest, lease.expiresAt - now())
      return { granted: false, queued: true, ...(soonest < Infinity ? { retryInMs: soonest } : {}) }
    },

    async extend(lease, ttlMs) {
      const held = ours(lease)
      if (!held) return { renewed: false }
      held.expiresAt = now() + ttlMs
      return { renewed: true }
    },

    async release(lease) {
      const sem = current(lease.key)
      if (!ours(lease) || !sem) return false
      sem.leases.delete(lease.owner)
      forgetIfIdle(lease.key, sem)
      notify(lease.key)
      return true
    },

    async abandon({ key, owner }) {
      // Owner-checked: only what this acquire holds or where it waits.
      const sem = current(key)
      if (!sem) return
      sem.leases.delete(owner)
      leaveLine(sem, owner)
      forgetIfIdle(key, sem)
      notify(key)
    },

    async inspect(key): Promise<LockInfo | null> {
      const sem = current(key)
      const sequence = store.sequences.get(key)
      if (sequence === undefined) return null
      return { held: (sem?.leases.size ?? 0) > 0, fence: sequence }
    },

    async holders(key): Promise<SemaphoreInfo | null> {
      const sem = current(key)
      if (!sem) return null
      const t = now()
      return {
        limit: sem.limit,
        held: heldOf(sem),
        holders: [...sem.leases].map(([owner, lease]) => ({
          owner,
          ...(lease.holder === undefined ? {} : { holder: lease.holder }),
          permits: lease.permits,
          sequence: lease.sequence,
          expiresInMs: lease.expiresAt - t,
        })),
        waiting: sem.line.length,
      }
    },

    async setLimit(key, limit) {
      const sem = current(key)
      if (sem) sem.limit = limit
      else store.sems.set(key, { limit, leases: new Map(), line: [] })
      notify(key)
    },

    waitForChange({ key }, signal) {
      return waitOn(store.waiters, key, signal)
    },
  }
}
