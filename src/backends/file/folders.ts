/**
 * The folders the backend creates in a lock root: key folders, `.epoch` and `.boot`. In a SHARED root
 * (sticky and writable by everyone, like /tmp: the CLI's per-host default, or any root made so), the
 * processes of several users share the locks, and a folder made with the process's umask (0755, mostly)
 * would shut every other user out of the key (or of every new key, for `.epoch` and `.boot`) that one user
 * touched first. So there each folder is made shared too, 1777: made aside and renamed into place, so
 * that no other user ever sees it with the umask's mode. Records stay the files their writers created:
 * 0644 with the usual umask, readable by every user, writable by none but their writer. In any other root
 * folders keep the umask. (What sharing guarantees, and what it does not, is in src/cli/lock-folder.ts.)
 *
 * Key folders are made synchronously, on the hot path (one mkdir, microseconds). The root and its `.epoch`
 * and `.boot` are made asynchronously (`rootMade`, `makeRootFolder`): they are made at first use, when
 * many acquires may start at once on a loaded disk, where one mkdir can wait tens of ms for a journal
 * commit, and nothing else then needs the event loop less.
 */
import { randomBytes } from 'node:crypto'
import { chmodSync, lstatSync, mkdirSync, renameSync, rmdirSync, statSync } from 'node:fs'
import { mkdir } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { BoundedMap } from '../../core/bounded-map.js'

/** rwx for everyone, and the sticky bit: what /tmp has. */
export const SHARED_MODE = 0o1777

/**
 * Whether `folder` (a link is followed) is a shared root: a folder of mode 1777. Not when it cannot be
 * looked at: the first operation in it says why.
 */
export function isSharedRoot(folder: string): boolean {
  try {
    const info = statSync(folder, { throwIfNoEntry: false })
    return info?.isDirectory() === true && (info.mode & SHARED_MODE) === SHARED_MODE
  } catch {
    return false
  }
}

/**
 * Makes `folder` a folder of mode 1777, creating it if missing; true when this call created it.
 * @throws when it is something else (a file, a link) or another user's folder of another mode
 */
export function shareFolder(folder: string): boolean {
  let info = lstatSync(folder, { throwIfNoEntry: false })
  let made = false
  if (info === undefined) {
    // The rename fails when someone made it meanwhile (or replaces it if it is still empty, so nobody
    // has pinned it yet: the same thing as making it first).
    const aside = join(dirname(folder), `.mkdir-${randomBytes(8).toString('hex')}`)
    mkdirSync(aside, { mode: 0o700 })
    try {
      chmodSync(aside, SHARED_MODE)
      renameSync(aside, folder)
      made = true
    } catch (error) {
      try {
        rmdirSync(aside)
      } catch {}
      if (!['EEXIST', 'ENOTEMPTY', 'EPERM'].includes((error as NodeJS.ErrnoException).code ?? '')) throw error
    }
    info = lstatSync(folder)
  }
  if (!info.isDirectory()) throw new Error(`${folder} is not a folder`)
  if ((info.mode & SHARED_MODE) === SHARED_MODE) return made
  if (info.uid !== process.getuid?.()) {
    throw new Error(
      `${folder} has mode ${(info.mode & 0o7777).toString(8)}, not 1777, and belongs to user ${info.uid}`,
    )
  }
  chmodSync(folder, SHARED_MODE)
  return made
}

/**
 * Creates `folder` if missing, shared in a shared root: `folder` when this call created it, else
 * undefined (what `mkdirSync` with `recursive` answers, which it is elsewhere). A folder that cannot be
 * shared (another user's, of another mode) is left as it is: the operation on it says why it fails.
 */
export function createFolder(folder: string, shared: boolean): string | undefined {
  if (!shared) return mkdirSync(folder, { recursive: true })
  try {
    return shareFolder(folder) ? folder : undefined
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== undefined) throw error
    return undefined
  }
}

/**
 * `createFolder` for a folder of the root (`.epoch`, `.boot`), off the event loop. In a shared root it is
 * `shareFolder`'s rename, synchronous: such a root exists already, and each of its folders is made once.
 */
export async function makeRootFolder(folder: string, shared: boolean): Promise<void> {
  if (shared) createFolder(folder, true)
  else await mkdir(folder, { recursive: true })
}

/**
 * The roots this process has made (or found), each one promise that every first acquire awaits. Bounded
 * like the epoch tables: a forgotten root is only made again (a mkdir that finds it).
 */
const ROOTS = new BoundedMap<string, Promise<void>>(64)

/**
 * Makes the lock root `dir` if missing, off the event loop, once per process: concurrent first acquires
 * share the one mkdir. A failure (a setting: errors.ts) reaches each of them, and is not kept: the next
 * acquire tries again. A root removed later is made again by the key folder's own (recursive) mkdir.
 */
export function rootMade(dir: string): Promise<void> {
  let made = ROOTS.get(dir)
  if (!made) {
    made = mkdir(dir, { recursive: true }).then(
      () => {},
      (error: unknown) => {
        ROOTS.delete(dir)
        throw error
      },
    )
    ROOTS.set(dir, made)
  }
  return made
}
