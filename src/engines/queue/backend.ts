/**
 * How a store plugs into the queue-lock engine (engine.ts), the same for every store on it (etcd,
 * ZooKeeper): `queueLockBackend` returns the backend object. The mutex's leased methods forward to one
 * engine over the store's lock queue, the election facet (election.ts) to another over its elections'
 * queue, the semaphore facet (semaphore.ts) to a third over its semaphores' lines where the store keeps
 * them, and the store's own methods (who holds a lock, the operator's list, break and doctor, its close)
 * are taken as given; the resume facet (resume.ts) where the store's adapters can adopt an entry and its
 * lease. A failure of a step is said in the backend's words ("Could not <what> lock …").
 */
import type { BackendLimits, LockBackend, LockInfo } from '../../core/backend.js'
import type { QueueAdapters } from './adapter.js'
import { type QueueElectionParts, queueElection } from './election.js'
import { QueueLock } from './engine.js'
import { queueLeasedMethods } from './leased-methods.js'
import { queueResume } from './resume.js'
import { type QueueSemaphoreParts, queueSemaphore } from './semaphore.js'

/** What a store on the queue engine gives beside its adapters: its name, limits, own methods and words. */
export interface QueueStore extends Required<Pick<LockBackend, 'list' | 'breakLock' | 'doctor'>> {
  /** Names the store in errors. */
  readonly id: string
  readonly limits: BackendLimits
  /** The error for a failed step: "Could not <what> <subject> <key> on <id>: <why, in the store's words>". */
  unavailable(key: string, what: string, error: unknown, subject: 'lock' | 'election' | 'semaphore'): Error
  /** Who holds `key`: the store's read of its lock queue (a failure is said by `unavailable`). */
  inspect(key: string, signal: AbortSignal): Promise<LockInfo | null>
  /** Closes what the store itself opened; called once both engines are closed. */
  close(): Promise<void>
}

/** Every store on the engine: leases live on sessions, waiters are woken by a watch, in line. */
const CAPABILITIES = { expiry: 'session', notify: true, fifo: true } as const

/**
 * The backend of a store on the queue engine: the mutex over `locks`, elections over `elections`,
 * semaphores over `semaphores` (when given), and `store`'s own methods. Its close closes the engines, then
 * the store.
 */
export function queueLockBackend<LockId, LockEntry, ElectionId, ElectionEntry, SemaphoreId>(
  store: QueueStore,
  locks: QueueAdapters<LockId, LockEntry>,
  elections: QueueElectionParts<ElectionId, ElectionEntry>,
  semaphores?: QueueSemaphoreParts<SemaphoreId>,
): LockBackend {
  const { id, limits } = store
  const mutex = new QueueLock(locks.queue, locks.leases)
  const unavailable = (key: string, what: string, error: unknown) =>
    store.unavailable(key, what, error, 'lock')
  const election = queueElection(elections, { id, capabilities: CAPABILITIES, limits }, (key, what, error) =>
    store.unavailable(key, what, error, 'election'),
  )
  const semaphore = semaphores
    ? queueSemaphore(semaphores, { id, capabilities: CAPABILITIES, limits }, (key, what, error) =>
        store.unavailable(key, what, error, 'semaphore'),
      )
    : undefined
  return {
    id,
    capabilities: CAPABILITIES,
    limits,
    // Where the store puts entries in several lines in one step (etcd's transaction, ZooKeeper's multi).
    ...(locks.queue.enqueueAll
      ? {
          multiKey: {
            tryAcquireAll: async (reqs, signal) => {
              try {
                return await mutex.attemptAll(reqs, signal)
              } catch (error) {
                if (signal.aborted) throw signal.reason
                throw unavailable(reqs.map((req) => req.key).join(', '), 'acquire', error)
              }
            },
            waitForChange: (reqs, signal) => mutex.waitAll(reqs, signal),
          },
        }
      : {
          multiKeyRefusal:
            'each key keeps a waiting line of its own, and this store cannot put entries in several lines ' +
            'in one step',
        }),
    ...queueLeasedMethods(mutex, unavailable),
    inspect: async (key, signal) => {
      try {
        return await store.inspect(key, signal)
      } catch (error) {
        throw unavailable(key, 'inspect', error)
      }
    },
    list: store.list,
    breakLock: async (key, options) => {
      try {
        return await store.breakLock(key, options)
      } catch (error) {
        if (options?.signal?.aborted) throw options.signal.reason
        throw unavailable(key, 'break', error)
      }
    },
    doctor: store.doctor,
    election: election.facet,
    ...(semaphore ? { semaphore: semaphore.facet } : {}),
    // Where entries can be read back and their leases kept alive by another client (etcd).
    ...(locks.queue.adopt && locks.leases.adopt ? { resume: queueResume(mutex, id, unavailable) } : {}),
    close: async () => {
      // Our own revokes delete our entries: not a loss (the core has told the holders already).
      await Promise.all([mutex.close(), election.close(), semaphore?.close()])
      await store.close()
    },
  }
}
