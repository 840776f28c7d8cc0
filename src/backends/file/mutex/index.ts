/**
 * The mutex of the file backend: one lease per key, held as the highest generation file of the key's
 * folder in the lock root. Its records and every operation on them live in this folder; what any
 * primitive of the backend shares lives beside it (the root, the host clock, generations, epochs, the
 * holders' processes, the watch, the sweep and the retirer). So another primitive (an election, a
 * semaphore) is one new folder beside this one, with its own records and operations and a facet like
 * `fileMutex`, plus one line in the shell (../index.ts) wiring it. (An election is this very lease with
 * a value, on a root of its own: ../election/ reuses these records and operations.) (The
 * sweep and doctor judge the root's folders by the mutex's records, `LEASE_RECORDS`; a primitive with
 * records of another shape also teaches sweep.ts to tell them apart.)
 *
 *   records.ts     the record: its shape, reading and making one, `isLive`, `holderGone`, the base a
 *                  successor goes on from, and what the sweep and doctor ask of it (`LEASE_RECORDS`)
 *   written.ts     what this process wrote last in each key folder (the hot path: no listing, no read)
 *   acquire.ts     one attempt of acquire
 *   transition.ts  extend, release, abandon, resume and proclaim: our record to the next generation,
 *                  owner-checked
 *   break.ts       breakLock
 *   inspect.ts     inspect and list
 */
import type { BreakOptions, BreakResult, ListedLock, LockBackend } from '../../../core/backend.js'
import { guarded } from '../errors.js'
import type { FolderRetirer } from '../retire.js'
import { folderOf, type Root } from '../root.js'
import type { SweepTrigger } from '../sweep.js'
import { folderChanged } from '../watch.js'
import { acquireOnce } from './acquire.js'
import { breakLock } from './break.js'
import { inspectKey, listHeld } from './inspect.js'
import { abandonAttempt, extendLease, releaseLease, resumeLease } from './transition.js'

export { LEASE_RECORDS } from './records.js'

/** The mutex's methods of the backend contract, and the file backend's `list` and `breakLock` of it. */
export interface FileMutex
  extends Pick<
    LockBackend,
    'tryAcquire' | 'extend' | 'release' | 'abandon' | 'inspect' | 'waitForChange' | 'resume'
  > {
  list(prefix: string): AsyncIterable<ListedLock>
  breakLock(key: string, options?: BreakOptions): Promise<BreakResult>
}

/** What the mutex tells the root's housekeeping: its releases (to retire) and its grants (to sweep). */
export interface MutexHousekeeping {
  readonly retirer: FolderRetirer
  /** Undefined when the backend never sweeps. */
  readonly sweeper: SweepTrigger | undefined
}

/** The mutex on `root`; every operation's failure is reported as `guarded` (errors.ts) says. */
export function fileMutex(root: Root, { retirer, sweeper }: MutexHousekeeping): FileMutex {
  return {
    tryAcquire: (req, signal) =>
      guarded(root, req.key, 'acquire', () => acquireOnce(root, req, signal, sweeper)),
    extend: (lease, ttlMs) => guarded(root, lease.key, 'extend', () => extendLease(root, lease, ttlMs)),
    release: (lease) =>
      guarded(root, lease.key, 'release', () => releaseLease(root, lease, retirer, sweeper)),
    abandon: (req) => guarded(root, req.key, 'abandon', () => abandonAttempt(root, req)),
    inspect: (key) => guarded(root, key, 'inspect', () => inspectKey(root, key)),
    waitForChange: ({ key, owner }, signal) =>
      folderChanged(folderOf(root, key), signal, () => root.seenBy.get(owner)),
    list: (prefix) => listHeld(root, prefix),
    breakLock: (key, options) =>
      guarded(root, key, 'break the lock', () => breakLock(root, key, options?.fence)),
    // The token carries no cookie: the record's file is read again where the lock resumes (it changes with
    // every renewal, so one written into the token would be stale by the next).
    resume: {
      encode: () => undefined,
      decode: async (lease) => {
        if (lease.cookie !== undefined) throw new TypeError('This lock token is damaged: copy it whole')
        const cookie = await guarded(root, lease.key, 'resume', () => resumeLease(root, lease))
        return cookie ? { cookie } : null
      },
    },
  }
}
