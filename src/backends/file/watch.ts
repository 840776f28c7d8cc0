/**
 * `waitForChange` of the file backend: fs.watch on the key's folder, a hint and never a grant; and
 * `untilNews`, the watch itself, which the elections' watch (election/watch.ts) arms too.
 */
import { watch } from 'node:fs'
import { GEN_NAME } from './generations.js'

/**
 * Whether an event on `name` (a name in the folder, the folder's own name when it is removed, or null)
 * may be news to a waiter whose latest read found generation `seen` (undefined: unknown). Only a
 * generation above `seen` changes the state: temp files come and go with every writer (the waiter's
 * reads of a fresh record touch its atime too), and a generation at or below `seen` is one the waiter has
 * read already, or an old one being collected. Those events also arrive late: an inotify watch on a
 * folder this process watched before is delivered what was queued before it was armed, and a hint that
 * fires the moment it is armed, twice, is turned off by the core for a wait (wake-hint.ts), which then
 * misses the release it was waiting for. Anything else (the folder itself removed, a name we do not know,
 * no name) is news.
 */
export function isNews(name: string | null, seen: bigint | undefined): boolean {
  if (name === null) return true
  if (name.startsWith('.tmp-')) return false
  if (GEN_NAME.test(name)) return seen === undefined || BigInt(name) > seen
  return true
}

/**
 * Resolves when `folder` may have changed since the waiter's latest read (`seen()`, asked at each event:
 * the read may follow the arming), or when `signal` aborts. No folder: the key has no record, so it is
 * free: this resolves at once, and the core's next attempt recreates it.
 */
export async function folderChanged(
  folder: string,
  signal: AbortSignal,
  seen: () => bigint | undefined = () => undefined,
): Promise<void> {
  await untilNews([{ folder, isNews: (name) => isNews(name, seen()) }], signal, 'wake')
}

/** A folder to watch, and which events in it (a name, or null) are news. */
export interface WatchTarget {
  readonly folder: string
  readonly isNews: (name: string | null) => boolean
}

/**
 * Resolves at the first news from an fs.watch on the first of `targets` whose folder exists, at that
 * watch's error, or when `signal` aborts: a hint, never a grant. Where no target's folder exists,
 * `noneExists` says whether to resolve at once ('wake') or stay pending ('wait'). Where a watch cannot be
 * armed for another reason (some network or FUSE file systems), it stays pending: resolving now would make
 * the core spin; its poll timer takes over and aborts this wait.
 */
export async function untilNews(
  targets: readonly WatchTarget[],
  signal: AbortSignal,
  noneExists: 'wake' | 'wait',
): Promise<void> {
  if (signal.aborted) return
  await new Promise<void>((done) => {
    let watcher: ReturnType<typeof watch> | undefined
    const finish = () => {
      signal.removeEventListener('abort', finish)
      watcher?.close()
      done()
    }
    signal.addEventListener('abort', finish, { once: true })
    for (const { folder, isNews } of targets) {
      try {
        watcher = watch(folder, { persistent: false }, (_event, name) => {
          if (isNews(name)) finish()
        })
        watcher.on('error', finish)
        return
      } catch (error) {
        // Not there (yet): the next target. Any other error: no watch here.
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') return
      }
    }
    if (noneExists === 'wake') finish()
  })
}
