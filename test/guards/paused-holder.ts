/**
 * The scenario every fence guard is tested with: holder A takes the lock and may write; A pauses past
 * its lease (it stops renewing, as a process stopped by a GC pause or SIGSTOP does, and its lease ends
 * on the store); B takes the lock with a greater fence. The test then has B write, and A write late.
 */
import assert from 'node:assert/strict'
import type { Lock, LockClient } from '../../src/index.js'
import { abortedWithin } from '../support/wait.js'

export interface PausedHolder {
  /** A: its lease is over, and it does not know. */
  readonly stale: Lock
  /** B: holds the lock now. */
  readonly next: Lock
}

/**
 * Runs the scenario on `key`; `first` is A's write while it still holds the lock (the first write after
 * the guard was set up). Give `locks` a short ttl (a second or so).
 */
export async function pausedHolder(
  locks: LockClient,
  key: string,
  first: (stale: Lock) => Promise<void>,
): Promise<PausedHolder> {
  const stale = await locks.acquire(key, { renew: false, timeout: '20s' })
  await first(stale)
  // A "pauses": no renewal; its lease ends on the store while it holds on to `stale`.
  await abortedWithin(stale.signal, 30_000)
  const next = await locks.acquire(key, { timeout: '30s' })
  assert.ok(next.fence > stale.fence, `B's fence ${next.fence} after A's ${stale.fence}`)
  return { stale, next }
}
