/** `waitForChange` of the file backend: fs.watch on the key's folder, a hint and never a grant. */
import { watch } from 'node:fs'

/** Resolves when `folder` may have changed (any new name is a new generation, or GC), or when `signal` aborts. */
export async function folderChanged(folder: string, signal: AbortSignal): Promise<void> {
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
      // Any new name in the folder is a new generation (or GC): a hint, never a grant.
      watcher = watch(folder, { persistent: false }, finish)
      watcher.on('error', finish)
    } catch (error) {
      // No folder: the key has no record, so it is free: wake the core, whose next attempt recreates it.
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') finish()
      // Otherwise no watch support here (some network or FUSE file systems): resolving now would make
      // the core spin, so stay pending; its poll timer takes over and aborts this wait.
    }
  })
}
