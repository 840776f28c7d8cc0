/**
 * A primitive's own lock root inside a lock root (`.elections`, `.semaphores`): the same settings, its own
 * folder, epochs and boot reservations (so its fences keep rising after its folders were retired or swept),
 * made once per backend, shared (1777) where the lock root is. Its name has no `~`, which every key folder's
 * has, so no lock of any name, nor the mutex's list, sweep, prune or doctor, ever sees it.
 */
import { join } from 'node:path'
import { BoundedMap } from '../../core/bounded-map.js'
import { seenEpochs, startsOf } from './epochs.js'
import { makeRootFolder, rootMade } from './folders.js'
import { type Root, SEEN_BY_LIMIT, UnreadableRecords } from './root.js'

/** The root `folder` (a name without `~`) of the lock root `root`. */
export function innerRoot(root: Root, folder: string, unreadableHoldMs: number): Root {
  const dir = join(root.dir, folder)
  return {
    ...root,
    dir,
    reserved: undefined,
    unreadable: new UnreadableRecords(unreadableHoldMs),
    seenBy: new BoundedMap(SEEN_BY_LIMIT),
    seen: seenEpochs(dir),
    starts: startsOf(dir, root.boot, root.durability),
  }
}

/**
 * Makes `inner` once per backend, before its first acquire: shared (1777) where the lock root `top` is, so
 * that every user of a shared root can use it (a key folder's own mkdir would make it 755). A failure is
 * not kept: the next acquire tries again.
 */
export function innerRootMaker(top: string, inner: Root): () => Promise<void> {
  let made: Promise<void> | undefined
  return () => {
    made ??= rootMade(top)
      .then(() => makeRootFolder(inner.dir, inner.shared))
      .catch((error: unknown) => {
        made = undefined
        throw error
      })
    return made
  }
}
