import { readFileSync } from 'node:fs'
import { uptime } from 'node:os'

/**
 * The host's monotonic clock in ms: CLOCK_MONOTONIC on Linux (libuv's hrtime), the same for every process
 * of one boot, and never stepped by NTP or an administrator. `performance.now()` would not do: its origin
 * is per process.
 */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6

let cached: string | undefined

/**
 * For tests only: a boot id that replaces the kernel's, for the processes that see this variable, so a
 * test plays a reboot (a new boot id, the files as they were) without one (test/kits/file.ts, `reboot`).
 * The monotonic clock is not faked: a record of another boot has expired whatever its deadline says.
 * @internal
 */
export const TEST_BOOT_ID = 'FENCELOCK_TEST_BOOT_ID'

/**
 * Identifies this boot, so a deadline from an earlier boot's clock is never compared with ours. Linux's
 * kernel boot id (a random UUID drawn at each boot) where there is one; elsewhere (macOS, Windows) the
 * boot's start on the wall clock, which is only good to a couple of minutes (`sameBoot`), and is marked
 * `uptime:` so that nothing relies on it more than that (`hasKernelBootId`).
 */
export function bootId(): string {
  const played = process.env[TEST_BOOT_ID]
  if (played) return played
  if (cached) return cached
  try {
    cached = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()
  } catch {}
  if (!cached) cached = `uptime:${Math.round(Date.now() / 1000 - uptime())}`
  return cached
}

/** Whether `id` is a kernel boot id, different for every boot (not one derived from the uptime). */
export const hasKernelBootId = (id: string): boolean => !id.startsWith('uptime:')

/** Boot ids derived from the uptime carry the wall clock's jitter: compare them with a tolerance. */
export function sameBoot(a: string, b: string): boolean {
  if (a.startsWith('uptime:') && b.startsWith('uptime:')) {
    return Math.abs(Number(a.slice(7)) - Number(b.slice(7))) <= 120
  }
  return a === b
}
