/**
 * `watch` of the file backend's elections, for an observer that holds nothing: fs.watch on the election's
 * folder, news being a generation above the one there when the watch was armed (a grant, a proclaim, a
 * release). The observer's own reads touch the current generation's atime and an inotify watch may be
 * handed events queued before it was armed: neither names a generation above that one, so neither wakes
 * it again and again. An election with no folder yet (never used, or retired) is watched from the
 * nearest folder above that exists, for the name of the missing one.
 */
import { readdir } from 'node:fs/promises'
import { basename, dirname } from 'node:path'
import { highest } from '../generations.js'
import { isNews, untilNews } from '../watch.js'

/**
 * Resolves when the election folder `folder` may have changed after the call began, or when `signal`
 * aborts. `top`: the highest folder to watch from (the lock root). The core reads after arming this, so a
 * change before the watch is armed is seen by that read.
 */
export async function electionChanged(folder: string, top: string, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return
  const names = await readdir(folder).catch(() => undefined)
  const seen = names && highest(names)
  // The folder, or the nearest one above it that exists (up to the lock root), and the name in it whose
  // events are news; where none can be watched, stay pending: the observer's paced read takes over.
  const targets = watchable(folder, top).map(([watched, child]) => ({
    folder: watched,
    isNews: (name: string | null) =>
      child === undefined ? isNews(name, seen) : name === null || name === child,
  }))
  await untilNews(targets, signal, 'wait')
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
