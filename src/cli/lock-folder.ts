/**
 * The CLI's default lock folder: one per host, so that every user's `fencelock run backup` excludes every
 * other's (root's cron job and a deploy user's alike), which is what "a lock on this host" means.
 *
 * It is /var/lock/fencelock (/tmp/fencelock where there is no /var/lock), made like /tmp itself: mode 1777,
 * so every user can create entries in it, and the sticky bit lets only an entry's owner (or the folder's)
 * remove or rename it. In a shared root (any root of mode 1777, the default or one named by --url) the
 * file backend makes the folders it creates shared too (src/backends/file/folders.ts), so one user's key
 * never shuts another out. Records stay the files their writers created: 0644 with the usual umask,
 * readable by every user, writable by none but their writer (a umask that would hide them from others, or
 * let others write them, makes the default fall back to the per-user folder).
 *
 * What this guarantees: the processes of every user exclude each other, and no user can delete, rename or
 * rewrite another's records (except in a key's folder they created: a folder's owner may). What it does
 * not: it is no security boundary. Any process that can write a key's folder can create its next
 * generation (that is the protocol), so a local user can hold a lock to block others, break one (its holder
 * finds out at its next renewal) or write a record with a lower fence. And since the sticky bit keeps a
 * user from collecting others' old generations, a user who deletes their own newest record rolls the key
 * back to an older one, whose successor repeats a fence: nobody may delete files in this folder by hand.
 */
import { accessSync, constants, existsSync, lstatSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { SHARED_MODE, shareFolder } from '../backends/file/folders.js'

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
 * one, and `note` says why. With `create` false (`doctor`, which changes nothing), the folder the same
 * call would choose, left as it is: a missing shared folder is chosen (doctor reports it missing), and
 * one of ours of another mode too (the first real use makes it 1777).
 */
export function defaultFolder(
  env: NodeJS.ProcessEnv = process.env,
  shared: string | undefined = sharedFolder(),
  note: (line: string) => void = (line) => process.stderr.write(`fencelock: ${line}\n`),
  create = true,
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
    if (!create) return checkShared(shared)
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

/**
 * `shareFolder`'s checks without its changes: `folder` when it is missing, shared (and we may write it),
 * or ours to make shared.
 * @throws what `shareFolder` or the access check would throw
 */
function checkShared(folder: string): string {
  const info = lstatSync(folder, { throwIfNoEntry: false })
  if (info === undefined) return folder
  if (!info.isDirectory()) throw new Error(`${folder} is not a folder`)
  if ((info.mode & SHARED_MODE) !== SHARED_MODE && info.uid !== process.getuid?.()) {
    throw new Error(
      `${folder} has mode ${(info.mode & 0o7777).toString(8)}, not 1777, and belongs to user ${info.uid}`,
    )
  }
  accessSync(folder, constants.W_OK | constants.X_OK)
  return folder
}
