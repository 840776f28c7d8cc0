/**
 * Read-write locks on the queue engine (engine.ts), the same for every store whose adapter keeps one line
 * of readers and writers (ZooKeeper, etcd): the engine grants by `readWriteRule` (grants.ts) over the modes
 * the adapter read with the line, and the fence is the entry's position, as a lock's. That meets the
 * read-write fence rule: a writer is granted only when first, so every grant before it was an entry ahead
 * of it (a smaller position); a reader is granted only with no writer ahead, so every writer granted before
 * it is ahead of it and every writer granted after it is behind it. Readers' fences are their own
 * positions: each reader its own epoch, between the writers around it.
 *
 * A downgrade marks our entry, in place and only while it is ours (the adapter's `proclaim`): ZooKeeper's
 * adapter writes its value with a last line `downgraded` (`downgradedValue`), etcd's deletes the writer's
 * gate key (Go's recipe orders by mod revision, so a put there would move the entry); the adapter then
 * reads such a writer's entry as a reader's. Where the store names an entry by its mode (Curator's
 * `__WRIT__`, etcd's `write/`), the name stays: a peer that reads only names keeps seeing a writer and
 * waits, which is safe; fencelock's readers read the mark and join it. Creating a read entry instead would
 * put it behind a queued writer (Curator's CURATOR-276: the writer got in between).
 */
import type { HeldLease, LeaseFacet, RwLockFacet, RwLockMode } from '../../core/backend.js'
import type { QueueAdapters } from './adapter.js'
import { type Acquisition, QueueLock } from './engine.js'
import { readWriteRule } from './grants.js'
import { queueLeasedMethods } from './leased-methods.js'

/** The last line of a downgraded writer's value. */
const DOWNGRADED = '\ndowngraded'

/** The value of a writer's entry once downgraded (the same when it is already). */
export const downgradedValue = (value: string): string =>
  isDowngraded(value) ? value : `${value}${DOWNGRADED}`

/** Whether an entry's value (or a store's text that ends with it) says its writer was downgraded. */
export const isDowngraded = (value: string): boolean => value.endsWith(DOWNGRADED)

/** What a store gives for its read-write locks: the line's adapter, its leases, and its own reads. */
export interface QueueRwLockParts<Id, Entry>
  extends QueueAdapters<Id, Entry>,
    Pick<RwLockFacet, 'holders' | 'inspect'> {}

/**
 * The rwlock facet over `parts`, named and limited as `named` says, and what its close must end. Failures
 * are said by `unavailable(key, what, error)`.
 */
export function queueRwLock<Id, Entry>(
  parts: QueueRwLockParts<Id, Entry>,
  named: Pick<LeaseFacet, 'id' | 'capabilities' | 'limits'>,
  unavailable: (key: string, what: string, error: unknown) => Error,
): { readonly facet: RwLockFacet; close(): Promise<void> } {
  const engine = new QueueLock(parts.queue, parts.leases, {
    grants: (req) => {
      if (!req.rwlock) throw new TypeError('A read-write lock acquire carries `rwlock` (its mode)')
      return readWriteRule(req.rwlock.mode)
    },
  })
  const facet: RwLockFacet = {
    ...named,
    ...queueLeasedMethods(engine, unavailable),
    async downgrade(lease: HeldLease, signal: AbortSignal) {
      const acq = lease.cookie as Acquisition<Id>
      try {
        const done = await engine.proclaim(acq, downgradedValue(acq.value), signal)
        return done ? { downgraded: true } : { downgraded: false }
      } catch (error) {
        if (signal.aborted) throw signal.reason
        throw unavailable(lease.key, 'downgrade', error)
      }
    },
    holders: parts.holders,
    inspect: parts.inspect,
  }
  return { facet, close: () => engine.close() }
}

/**
 * `facet`, telling `modes` the mode of each acquire by its owner id while the acquire is under way or
 * holds: for an adapter that names an entry by its mode (Curator's `__WRIT__`, etcd's `write/`), which
 * `nameOf` learns only from the owner.
 */
export function tellingModes(facet: RwLockFacet, modes: Map<string, RwLockMode>): RwLockFacet {
  return {
    ...facet,
    tryAcquire: (req, signal) => {
      if (req.rwlock) modes.set(req.owner, req.rwlock.mode)
      return facet.tryAcquire(req, signal)
    },
    release: (lease, signal) => {
      modes.delete(lease.owner)
      return facet.release(lease, signal)
    },
    abandon: (req, signal) => {
      modes.delete(req.owner)
      return facet.abandon(req, signal)
    },
  }
}
