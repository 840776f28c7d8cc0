/**
 * `watch` of the file backend's elections, for an observer that holds nothing: fs.watch on the election's
 * folder, news being a generation above the one there when the watch was armed (a grant, a proclaim, a
 * release). The observer's own reads touch the current generation's atime and an inotify watch may be
 * handed events queued before it was armed: neither names a generation above that one, so neither wakes
 * it again and again. An election with no folder yet (never used, or retired) is watched from the
 * nearest folder above that exists, for the name of the missing one.
 */
import { watch } from 'node:fs'
import { readdir } from 'node:fs/promises'
import { basename, dirname } from 'node:path'
import { highest } from '../generations.js'
import { isNews } from '../watch.js'

/**
 * Resolves when the election folder `folder` may have changed after the call began, or when `signal`
 * aborts. `top`: the highest folder to watch from (the lock root). The core reads after arming this, so a
 * change before the watch is armed is seen by that read.
 */
export async function electionChanged(folder: string, top: string, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return
  const names = await readdir(folder).catch(() => undefined)
  const seen = names && highest(names)
  await new Promise<void>((done) => {
    let watcher: ReturnType<typeof watch> | undefined
    const finish = () => {
      signal.removeEventListener('abort', finish)
      watcher?.close()
      done()
    }
    signal.addEventListener('abort', finish, { once: true })
    // The folder, or the nearest one above it that exists (up to the lock root), and the name in it
    // whose events are news; where none can be watched, stay pending: the observer's paced read takes over.
    for (const [watched, child] of watchable(folder, top)) {
      try {
        watcher = watch(watched, { persistent: false }, (_event, name) => {
          if (child === undefined ? isNews(name, seen) : name === null || name === child) finish()
        })
        watcher.on('error', finish)
        return
      } catch (error) {
        // Not there (yet): watch for it to appear one level up. Any other error: no watch here (some
        // network or FUSE file systems).
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') return
      }
    }
  })
}

/** `folder` itself, then each folder above it up to `top`, with the name of the one below it. */
function watchable(folder: string, top: string): [string, string | undefined][] {
  const chain: [string, string | undefined][] = [[folder, undefined]]
  let below = folder
  while (below !== top && dirname(below) !== below) {
    chain.push([dirname(below), basename(below)])
    below = dirname(below)
  }
  return chain
}
