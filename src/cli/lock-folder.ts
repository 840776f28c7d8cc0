/**
 * The CLI's default lock folder: one per host, so that every user's `fencelock run backup` excludes every
 * other's (root's cron job and a deploy user's alike), which is what "a lock on this host" means.
 *
 * It is /var/lock/fencelock (/tmp/fencelock where there is no /var/lock), made like /tmp itself: mode 1777,
 * so every user can create entries in it, and the sticky bit lets only an entry's owner (or the folder's)
 * remove or rename it. The file backend creates a key's folder and the epoch folder with the process's
 * umask (0755, mostly), which would shut every other user out of a key one user took first; so in a shared
 * root (any root of mode 1777, the default or one named by --url) the CLI creates those folders itself,
 * 1777 too, before each attempt (`sharedFolders`). Records stay the files their writers created: 0644 with
 * the usual umask, readable by every user, writable by none but their writer (a umask that would hide
 * them from others, or let others write them, makes the default fall back to the per-user folder).
 *
 * What this guarantees: the processes of every user exclude each other, and no user can delete, rename or
 * rewrite another's records (except in a key's folder they created: a folder's owner may). What it does
 * not: it is no security boundary. Any process that can write a key's folder can create its next
 * generation (that is the protocol), so a local user can hold a lock to block others, break one (its holder
 * finds out at its next renewal) or write a record with a lower fence. And since the sticky bit keeps a
 * user from collecting others' old generations, a user who deletes their own newest record rolls the key
 * back to an older one, whose successor repeats a fence: nobody may delete files in this folder by hand.
 */
import { randomBytes } from 'node:crypto'
import {
  accessSync,
  chmodSync,
  constants,
  existsSync,
  lstatSync,
  mkdirSync,
  renameSync,
  rmdirSync,
} from 'node:fs'
import { homedir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { BOOT_FOLDER, EPOCH_FOLDER } from '../backends/file/epochs.js'
import { keyFolderName } from '../backends/file/generations.js'
import type { LockBackend } from '../core/backend.js'

/** rwx for everyone, and the sticky bit: what /tmp has. */
const SHARED_MODE = 0o1777

/** This host's shared lock folder; none on Windows, which has no sticky bit. */
export function sharedFolder(platform: NodeJS.Platform = process.platform): string | undefined {
  if (platform === 'win32') return undefined
  return existsSync('/var/lock') ? '/var/lock/fencelock' : '/tmp/fencelock'
}

/** The per-user folder: locks shared by this user's processes only, kept across reboots. */
export function perUserFolder(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_STATE_HOME || join(homedir(), '.local', 'state'), 'fencelock', 'locks')
}

/**
 * The default lock folder: the shared one, created if missing, when it can be used; else the per-user
 * one, and `note` says why.
 */
export function defaultFolder(
  env: NodeJS.ProcessEnv = process.env,
  shared: string | undefined = sharedFolder(),
  note: (line: string) => void = (line) => process.stderr.write(`fencelock: ${line}\n`),
): string {
  const own = perUserFolder(env)
  if (shared === undefined) return own
  try {
    const umask = process.umask()
    // Other users must be able to read our records (to see the lock held) and must not rewrite them.
    if ((umask & 0o006) !== 0o002) {
      const shown = umask.toString(8).padStart(4, '0')
      throw new Error(
        (umask & 0o004) === 0
          ? `the umask ${shown} would let other users rewrite this user's lock records`
          : `the umask ${shown} would hide this user's lock records from other users`,
      )
    }
    shareFolder(shared)
    accessSync(shared, constants.W_OK | constants.X_OK)
    return shared
  } catch (error) {
    note(
      `cannot use the shared lock folder ${shared} (${(error as Error).message}); using ${own}, which only ` +
        "this user's processes share",
    )
    return own
  }
}

/** Whether `folder` is a shared root: a real folder (not a link to one) of mode 1777. */
export function isShared(folder: string): boolean {
  const info = lstatSync(folder, { throwIfNoEntry: false })
  return info?.isDirectory() === true && (info.mode & SHARED_MODE) === SHARED_MODE
}

/**
 * Makes `folder` a folder of mode 1777, creating it if missing.
 * @throws when it is something else (a file, a link) or another user's folder of another mode
 */
export function shareFolder(folder: string): void {
  let info = lstatSync(folder, { throwIfNoEntry: false })
  if (info === undefined) {
    // Made aside and renamed into place, so that no other user ever sees it with our umask's mode. The
    // rename fails when someone made it meanwhile (or replaces it if it is still empty: the same thing).
    const aside = join(dirname(folder), `.mkdir-${randomBytes(8).toString('hex')}`)
    mkdirSync(aside, { mode: 0o700 })
    try {
      chmodSync(aside, SHARED_MODE)
      renameSync(aside, folder)
    } catch (error) {
      try {
        rmdirSync(aside)
      } catch {}
      if (!['EEXIST', 'ENOTEMPTY', 'EPERM'].includes((error as NodeJS.ErrnoException).code ?? '')) throw error
    }
    info = lstatSync(folder)
  }
  if (!info.isDirectory()) throw new Error(`${folder} is not a folder`)
  if ((info.mode & SHARED_MODE) === SHARED_MODE) return
  if (info.uid !== process.getuid?.()) {
    throw new Error(
      `${folder} has mode ${(info.mode & 0o7777).toString(8)}, not 1777, and belongs to user ${info.uid}`,
    )
  }
  chmodSync(folder, SHARED_MODE)
}

/**
 * The backend, made to create the epoch and reservation folders and each key's folder of a shared file root with mode
 * 1777 before each attempt (one stat each when they are right); any other backend unchanged.
 */
export function sharedFolders(backend: LockBackend, url: URL): LockBackend {
  if (url.protocol !== 'file:') return backend
  const root = fileURLToPath(url)
  if (!isShared(root)) return backend
  return {
    ...backend,
    tryAcquire(request, signal) {
      for (const folder of [BOOT_FOLDER, EPOCH_FOLDER, keyFolderName(request.key)]) {
        try {
          shareFolder(join(root, folder))
        } catch {
          // The backend's own attempt then fails on it, naming the path and the reason.
        }
      }
      return backend.tryAcquire(request, signal)
    },
  }
}
