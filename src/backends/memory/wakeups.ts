/**
 * Waiters of a key within the process, woken all at once: the memory backend's notifications, shared by
 * its lease tables (leases.ts) and its semaphores (semaphore.ts).
 */

/** The wake-ups of each key's waiters. */
export type Wakeups = Map<string, Set<() => void>>

/** Resolves when `key`'s waiters are woken, or when `signal` aborts. */
export function waitOn(wakeups: Wakeups, key: string, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal.aborted) return resolve()
    let set = wakeups.get(key)
    if (!set) {
      set = new Set()
      wakeups.set(key, set)
    }
    const wake = () => {
      signal.removeEventListener('abort', wake)
      const waiting = wakeups.get(key)
      waiting?.delete(wake)
      if (waiting?.size === 0) wakeups.delete(key)
      resolve()
    }
    set.add(wake)
    signal.addEventListener('abort', wake, { once: true })
  })
}

/** Wakes every waiter of `key`. */
export function wakeAll(wakeups: Wakeups, key: string): void {
  const set = wakeups.get(key)
  if (!set) return
  wakeups.delete(key)
  for (const wake of set) wake()
}
