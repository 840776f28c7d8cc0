/**
 * Whether a process group still runs something: `fencelock run` holds its lock until the command's whole
 * group is gone. `kill(-group, 0)` also finds zombies, members that have exited and wait for their parent
 * to collect them; a parent that never does (fencelock itself as a container's PID 1, which Node cannot
 * make reap orphans, or a parent outside the group that ignores its children) would keep the lock held and
 * fencelock waiting for ever. Zombies run nothing, so where /proc tells, they do not count (the watchdog's
 * `running` in ./watchdog.ts applies the same rule).
 */
import { readdirSync, readFileSync } from 'node:fs'

/** True while a member of `group` runs (a live process, not a zombie); true too when /proc cannot tell. */
export function groupRunning(
  group: number,
  send: (signal: 0) => boolean = () => signalGroup(group),
): boolean {
  if (!send(0)) return false
  let entries: string[]
  try {
    entries = readdirSync('/proc')
  } catch {
    return true
  }
  let readable = false
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'latin1')
    } catch {
      continue // gone while we looked, or not ours to read
    }
    readable = true
    // "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses, so split after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    if (Number(fields[2]) === group && fields[0] !== 'Z') return true
  }
  // No stat file readable at all (hidepid, no /proc): kill's answer stands.
  return !readable
}

function signalGroup(group: number): boolean {
  try {
    process.kill(-group, 0)
    return true
  } catch {
    return false
  }
}
