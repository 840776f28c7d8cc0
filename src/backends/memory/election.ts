/**
 * Leader election on the memory backend: a lease table of its own (so a lock and an election of one
 * name are independent), the leader's value on its entry, and observers woken by grants, releases and
 * proclaims. A leader that stops renewing is seen gone by the observer's read at its lease end.
 */
import type { BreakOptions, BreakResult, ElectionFacet } from '../../core/backend.js'
import { leaseTable } from './leases.js'

/** The election facet, with `breakLock` for tests that end a leadership behind its leader's back. */
export interface MemoryElection extends ElectionFacet {
  breakLock(name: string, options?: BreakOptions): Promise<BreakResult>
}

/** The elections of the store named `name`; `id` and `capabilities` are the backend's. */
export function memoryElection(
  name: string,
  shell: Pick<ElectionFacet, 'id' | 'capabilities'>,
): MemoryElection {
  const table = leaseTable('election', name, { wakeOnGrant: true })
  return {
    ...shell,
    ...table.methods,
    async proclaim(lease, value) {
      const entry = table.ours(lease)
      if (!entry) return { proclaimed: false }
      entry.value = value
      table.notify(lease.key)
      return { proclaimed: true }
    },
    async watch(key, signal) {
      await table.methods.waitForChange?.({ key, owner: '', ttlMs: 0 }, signal)
    },
  }
}
