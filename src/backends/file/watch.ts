/** `waitForChange` of the file backend: fs.watch on the key's folder, a hint and never a grant. */
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
 * the read may follow the arming), or when `signal` aborts.
 */
export async function folderChanged(
  folder: string,
  signal: AbortSignal,
  seen: () => bigint | undefined = () => undefined,
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
    try {
      // A new generation (or the folder removed): a hint, never a grant.
      watcher = watch(folder, { persistent: false }, (_event, name) => {
        if (isNews(name, seen())) finish()
      })
      watcher.on('error', finish)
    } catch (error) {
      // No folder: the key has no record, so it is free: wake the core, whose next attempt recreates it.
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') finish()
      // Otherwise no watch support here (some network or FUSE file systems): resolving now would make
      // the core spin, so stay pending; its poll timer takes over and aborts this wait.
    }
  })
}
