/**
 * The owner ids of the leases this client holds on one semaphore or read-write lock, so that `inspect` can
 * mark its own holders (`isMe`): an owner is counted from its grant until its lease is released or lost.
 */
import type { LockHandle } from './lock.js'

/** Counts `lock`'s lease in `mine` until it is lost; the handle's release removes it (see the callers). */
export function trackOwnLease(lock: LockHandle, mine: Set<string>): void {
  const owner = lock.owner
  mine.add(owner)
  const ended = (): void => {
    mine.delete(owner)
  }
  if (lock.signal.aborted) ended()
  else lock.signal.addEventListener('abort', ended, { once: true })
}
