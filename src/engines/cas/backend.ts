/**
 * How a store plugs into the cas-lease engine (engine.ts; S3, GCS, DynamoDB): `casLeaseBackend` returns
 * the backend object, the mutex's leased methods and an operator's list and break forwarded to the
 * engine. The adapter is the whole store part: its doctor is the backend's, and list is offered only
 * where the adapter can list its store. Elections: none on this engine.
 */
import type { BackendCapabilities, LockBackend } from '../../core/backend.js'
import type { CasAdapter } from './adapter.js'
import { CasLease, type CasLeaseOptions } from './engine.js'

/** Leases end by a waiter's observation; no notifications, no order among waiters. */
const CAPABILITIES: BackendCapabilities = { expiry: 'observed', notify: false, fifo: false }

/** A LockBackend over `adapter`: the cas-lease engine. */
export function casLeaseBackend(adapter: CasAdapter, options: CasLeaseOptions = {}): LockBackend {
  const engine = new CasLease(adapter, options)
  const backend: LockBackend = {
    id: options.id ?? adapter.id,
    capabilities: CAPABILITIES,
    // A new record's grant waits for the store's clock between its two attempts: the core gives it that
    // time also past a shorter timeout (`Busy.pending`), so every attempt keeps the adapter's own bound.
    limits: adapter.limits,
    tryAcquire: (req, signal) => engine.attempt(req, signal),
    extend: (lease, ttlMs, signal) => engine.holds.extend(lease, ttlMs, signal),
    release: (lease, signal) => engine.holds.release(lease, signal),
    inspect: (key, signal) => engine.inspect(key, signal),
    abandon: (req, signal) => engine.abandon(req, signal),
    breakLock: (key, options) => engine.operations.breakLock(key, options),
    close: async () => {
      await engine.retirer.close()
      await adapter.close()
    },
  }
  const doctor = adapter.doctor?.bind(adapter)
  // Only where the adapter can list its store: the client says so for one that cannot.
  const list: LockBackend['list'] =
    adapter.list && ((prefix, signal) => engine.operations.list(prefix, signal))
  return { ...backend, ...(doctor ? { doctor } : {}), ...(list ? { list } : {}) }
}
