/** The mutex of the memory backend: one lease table per named store (leases.ts). */
import { type LeaseMethods, leaseTable } from './leases.js'

/** The mutex of the store named `name` (shared by every backend of that name in the process). */
export function memoryMutex(name: string): LeaseMethods {
  return leaseTable('mutex', name).methods
}
