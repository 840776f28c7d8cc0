/**
 * Leader election on the file backend: a lease of the mutex (its records, acquire, extend, release,
 * abandon, inspect: ../mutex/) whose record also carries the leader's value, kept in a lock root of its
 * own, `<root>/.elections/`. That folder's name has no `~`, which every key folder's has, so no lock of
 * any name, nor the mutex's list, sweep, prune or doctor, ever sees an election, and an election `x` and
 * a lock `x` are independent. It has its own epoch counter and boot reservations (so a term exceeds
 * every earlier one of its election, also after its folder was retired or swept), its own retirer and
 * sweep, and is shared (1777) like the root it is in.
 *
 *   index.ts   the facet: the mutex on the election root, proclaim, watch
 *   watch.ts   watch: fs.watch on the election's folder, for an observer that holds nothing
 */
import type { BreakOptions, BreakResult, ElectionFacet } from '../../../core/backend.js'
import { guarded } from '../errors.js'
import { innerRoot, innerRootMaker } from '../inner-root.js'
import { fileMutex, type MutexHousekeeping } from '../mutex/index.js'
import { proclaimValue } from '../mutex/transition.js'
import { folderOf, type Root } from '../root.js'
import { electionChanged } from './watch.js'

/** The elections' root in a lock root: no key folder has this name (they all contain `~`). */
export const ELECTION_FOLDER = '.elections'

/** The election facet, with `breakLock` for tests and operators that end a leadership behind its back. */
export interface FileElection extends ElectionFacet {
  watch(key: string, signal: AbortSignal): Promise<void>
  breakLock(name: string, options?: BreakOptions): Promise<BreakResult>
}

/** The elections' root of the lock root `root`: the same settings, its own folder and epochs. */
export function electionRoot(root: Root, unreadableHoldMs: number): Root {
  return innerRoot(root, ELECTION_FOLDER, unreadableHoldMs)
}

/**
 * The elections on `elections` (an `electionRoot`), inside the lock root `top`; every operation's failure
 * is reported as `guarded` (errors.ts) says.
 */
export function fileElection(
  top: string,
  elections: Root,
  housekeeping: MutexHousekeeping,
  shell: Pick<ElectionFacet, 'id' | 'capabilities' | 'limits'>,
): FileElection {
  const { list: _list, breakLock, ...lease } = fileMutex(elections, housekeeping)
  const made = innerRootMaker(top, elections)
  return {
    ...shell,
    ...lease,
    tryAcquire: async (req, signal) => {
      await guarded(elections, req.key, 'acquire', made)
      return lease.tryAcquire(req, signal)
    },
    breakLock,
    proclaim: (held, value) =>
      guarded(elections, held.key, 'proclaim', async () => {
        const cookie = await proclaimValue(elections, held, value)
        return cookie === undefined ? { proclaimed: false } : { proclaimed: true, cookie }
      }),
    watch: (key, signal) => electionChanged(folderOf(elections, key), top, signal),
  }
}
