/**
 * The folders the backend creates in a lock root: key folders, `.epoch` and `.boot`. In a SHARED root
 * (sticky and writable by everyone, like /tmp: the CLI's per-host default, or any root made so), the
 * processes of several users share the locks, and a folder made with the process's umask (0755, mostly)
 * would shut every other user out of the key (or of every new key, for `.epoch` and `.boot`) that one user
 * touched first. So there each folder is made shared too, 1777: made aside and renamed into place, so
 * that no other user ever sees it with the umask's mode. Records stay the files their writers created:
 * 0644 with the usual umask, readable by every user, writable by none but their writer. In any other root
 * folders keep the umask. (What sharing guarantees, and what it does not, is in src/cli/lock-folder.ts.)
 */
import { randomBytes } from 'node:crypto'
import { chmodSync, lstatSync, mkdirSync, renameSync, rmdirSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'

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
