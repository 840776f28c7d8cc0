/**
 * What a failed file operation means for the caller: a setting to fix (a path, a permission, a mount),
 * refused at once, or an outage the core may retry. Every operation of the backend runs through `guarded`.
 */
import { BackendUnavailableError, causeText, LockError, quoteKey } from '../../core/errors.js'
import { EpochError } from './epochs.js'
import type { Root } from './root.js'

/** errno codes that repeat until someone changes a setting (a path, a permission, a mount), in plain words. */
const SETTING_ERRORS: Readonly<Record<string, string>> = {
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOTDIR: 'a part of the path is a file, not a folder',
  EEXIST: 'a file is in the way where the folder must be',
  EROFS: 'the file system is mounted read-only',
  ENOSPC: 'no space left on the device',
  EDQUOT: "the user's disk quota is used up",
  ELOOP: 'too many symbolic links in the path',
  ENAMETOOLONG: 'the path is too long',
}

/** Runs `operation` (what it does, in words: `what`) on `key`, turning its failure into the error to report. */
export async function guarded<T>(
  root: Root,
  key: string,
  what: string,
  operation: () => Promise<T>,
): Promise<T> {
  try {
    return await operation()
  } catch (error) {
    throw fileError(root, key, what, error)
  }
}

function fileError(root: Root, key: string, what: string, cause: unknown): LockError {
  if (cause instanceof LockError) return cause
  if (cause instanceof EpochError) {
    return new BackendUnavailableError(
      `File backend ${root.id} cannot start a fence range for lock ${quoteKey(key)}: ${cause.message}`,
      { key, backend: root.id, cause, retryable: cause.retryable },
    )
  }
  const code = (cause as NodeJS.ErrnoException)?.code
  const plain = code === undefined ? undefined : SETTING_ERRORS[code]
  if (plain !== undefined) {
    const path = (cause as NodeJS.ErrnoException).path ?? root.dir
    return new BackendUnavailableError(
      `File backend ${root.id} cannot create or write ${path} for lock ${quoteKey(key)}: ${code} (${plain}). ` +
        'This is a setting, not an outage: fix the lock folder path, its permissions or its file system; every ' +
        'process that shares these locks must be able to create folders and files in it',
      { key, backend: root.id, cause, retryable: false },
    )
  }
  return new BackendUnavailableError(
    `File backend ${root.id} could not ${what} for lock ${quoteKey(key)}: ${causeText(cause)}. ` +
      'Check that the folder exists on a local file system and is writable by this user',
    { key, backend: root.id, cause },
  )
}
