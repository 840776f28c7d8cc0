/** The mutex of the memory backend: one lease table per named store (leases.ts), and its atomic multi-key step. */
import type { MultiKeyFacet } from '../../core/backend.js'
import { type LeaseMethods, leaseTable } from './leases.js'

/** The mutex of the store named `name` (shared by every backend of that name in the process). */
export function memoryMutex(name: string): LeaseMethods & { readonly multiKey: MultiKeyFacet } {
  const table = leaseTable('mutex', name)
  // Atomic by construction: every key is checked and granted in one synchronous step.
  return { ...table.methods, multiKey: { tryAcquireAll: async (requests) => table.acquireAll(requests) } }
}
