/**
 * How a store plugs into the sql-lease engine (engine.ts; PostgreSQL, MySQL/MariaDB): `sqlLeaseBackend`
 * returns the backend object. The mutex's leased methods and the operator's (list, break, doctor) forward
 * to one engine over the adapter's lock table; the election facet (election.ts), where the store gives an
 * elections table, to another engine over it; the semaphore facet (semaphore.ts), where the store gives
 * semaphore tables, to the semaphore engine; the rwlock facet (rwlock.ts), where the store gives read-write
 * lock tables, to the read-write lock engine; atomic sets, where the adapter runs them (`acquireAll`), to the
 * mutex's engine. Doctor adds each one's table findings. The adapters are the
 * whole store part: the engine reads, lists and diagnoses through them.
 */
import type { LockBackend } from '../../core/backend.js'
import { OWNER_CHECKED_RESUME } from '../../core/resume.js'
import type { SqlAdapter } from './adapter.js'
import { type SqlElectionAdapter, sqlElection } from './election.js'
import { SqlLease, type SqlLeaseOptions, sqlLeaseFacet } from './engine.js'
import { sqlRwLock } from './rwlock.js'
import type { SqlRwLockAdapter } from './rwlock-adapter.js'
import { sqlSemaphore } from './semaphore.js'
import type { SqlSemaphoreAdapter } from './semaphore-adapter.js'

/** An elections table's adapter, and its engine's options (the mutex's do not carry over). */
export interface SqlElections {
  readonly adapter: SqlElectionAdapter
  readonly options?: SqlLeaseOptions | undefined
}

/** The semaphore tables' adapter, and its engine's options. */
export interface SqlSemaphores {
  readonly adapter: SqlSemaphoreAdapter
  readonly options?: SqlLeaseOptions | undefined
}

/** The read-write lock tables' adapter, and its engine's options. */
export interface SqlRwLocks {
  readonly adapter: SqlRwLockAdapter
  readonly options?: SqlLeaseOptions | undefined
}

/**
 * A LockBackend over `adapter`: the sql-lease engine, with elections over `elections` and semaphores over
 * `semaphores` and read-write locks over `rwlocks` when given. Its close closes those engines first (their subscriptions), then the mutex's
 * (whose adapter may end the client they all share).
 */
export function sqlLeaseBackend(
  adapter: SqlAdapter,
  options: SqlLeaseOptions = {},
  elections?: SqlElections,
  semaphores?: SqlSemaphores,
  rwlocks?: SqlRwLocks,
): LockBackend {
  const engine = new SqlLease(adapter, options)
  const mutex: LockBackend = {
    ...sqlLeaseFacet(engine, adapter, options.id ?? adapter.id),
    list: (prefix, signal) => engine.list(prefix, signal),
    breakLock: (key, options) => engine.breakLock(key, options),
    doctor: (signal) => engine.doctor(signal),
    close: () => engine.close(),
    // A row's owner and fence are what extend and release check, on the server's clock: a token needs no more.
    resume: OWNER_CHECKED_RESUME,
    // Every key's row in one transaction, where the adapter can run one (atomic sets).
    ...(adapter.acquireAll
      ? { multiKey: { tryAcquireAll: (reqs, signal) => engine.attemptAll(reqs, signal) } }
      : { multiKeyRefusal: 'its adapter runs no transaction over several lease rows' }),
  }
  const election = elections && sqlElection(elections.adapter, elections.options)
  const semaphore = semaphores && sqlSemaphore(semaphores.adapter, semaphores.options)
  const rwlock = rwlocks && sqlRwLock(rwlocks.adapter, rwlocks.options)
  if (election === undefined && semaphore === undefined && rwlock === undefined) return mutex
  return {
    ...mutex,
    ...(election ? { election: election.facet } : {}),
    ...(semaphore ? { semaphore: semaphore.facet } : {}),
    ...(rwlock ? { rwlock: rwlock.facet } : {}),
    doctor: async (signal: AbortSignal) => [
      ...(await engine.doctor(signal)),
      ...(election ? await election.doctor(signal) : []),
      ...(semaphore ? await semaphore.doctor(signal) : []),
      ...(rwlock ? await rwlock.doctor(signal) : []),
    ],
    async close() {
      const closed = await Promise.allSettled([election?.close(), semaphore?.close(), rwlock?.close()])
      await engine.close()
      for (const outcome of closed) if (outcome.status === 'rejected') throw outcome.reason
    },
  }
}
