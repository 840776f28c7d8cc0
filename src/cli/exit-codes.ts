import {
  BackendUnavailableError,
  CapabilityError,
  DriverMissingError,
  LimitMismatchError,
  LockLostError,
  LockNotAcquiredError,
} from '../core/errors.js'

/**
 * Exit codes of the CLI. `fencelock run` otherwise exits with its command's status (128 + N when the command
 * died of signal N, as shells do), so a command that itself exits with one of these is ambiguous; pick
 * other codes in commands whose status matters to you.
 */
export const EXIT = {
  ok: 0,
  /**
   * Bad arguments, malformed or unsupported URL, missing driver package, a primitive the store lacks, a
   * semaphore's --limit other than the stored one (sysexits EX_USAGE).
   */
  usage: 64,
  /** The store could not be reached (EX_UNAVAILABLE). */
  unavailable: 69,
  /** The timeout passed while another owner held the lock (EX_TEMPFAIL: try again later). */
  notAcquired: 75,
  /** The lock was lost while the command ran; the command was sent SIGTERM (then SIGKILL). */
  lost: 76,
  /** `doctor --strict`: a finding is a warning (EX_CONFIG: a setting to look at), none is an error. */
  warnings: 78,
  /** The command could not be executed. */
  cannotExecute: 126,
  /** The command was not found. */
  notFound: 127,
} as const

export function exitCodeFor(error: unknown): number {
  if (error instanceof LockNotAcquiredError) return EXIT.notAcquired
  if (error instanceof LockLostError) return EXIT.lost
  if (
    error instanceof DriverMissingError ||
    error instanceof CapabilityError ||
    error instanceof LimitMismatchError ||
    error instanceof TypeError
  ) {
    return EXIT.usage
  }
  if (error instanceof BackendUnavailableError) return EXIT.unavailable
  return EXIT.unavailable
}
