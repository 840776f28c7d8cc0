/**
 * The holder's processes: which processes of this host a lease lives with, and whether they are all gone.
 *
 * A grant records them (`HolderProcesses`): each pid with its start time (field 22 of /proc/<pid>/stat,
 * in clock ticks since boot), plus the pid namespace they are numbered in. A pid alone is no identity (the
 * kernel reuses pids); a pid and its start time within one boot (the record's boot id) is. A lease whose
 * processes are ALL gone is over at once, as flock(1)'s lock ends with its last holder: nobody can renew
 * or release it any more, and nothing it guarded runs.
 *
 * Only certainty frees a lease; in any doubt the ttl decides, as if no processes were recorded:
 *   - a record of another boot (it has expired anyway) or from a host without a kernel boot id;
 *   - another pid namespace than ours (a container sharing the folder: its pids mean nothing here), or a
 *     /proc that is not our namespace's, or no /proc at all (macOS, Windows: nothing is recorded there);
 *   - a process that exists but whose start time cannot be read (/proc mounted with hidepid): alive.
 * Existence is asked with kill(pid, 0), which answers for every user's processes (EPERM: it exists), and
 * only then is /proc read for the start time (a reused pid) and the state (a zombie has stopped running).
 */
import { readFileSync, readlinkSync } from 'node:fs'
import { hasKernelBootId } from './host-clock.js'

/** One process: its pid and its start time (clock ticks since boot, decimal), which tell it from a reuse. */
export interface ProcessMark {
  readonly pid: number
  readonly start: string
}

/** What a record says of the processes its lease lives with. */
export interface HolderProcesses {
  /** The pid namespace the pids are numbered in, as /proc/self/ns/pid names it ("pid:[4026531836]"). */
  readonly ns: string
  readonly marks: readonly ProcessMark[]
}

/** What /proc/<pid>/stat says of a process we need: its state letter and its start time. */
function statOf(pid: number): { state: string; start: string } | undefined {
  let text: string
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8')
  } catch {
    return undefined
  }
  // Field 2, the command name, is in parentheses and may hold spaces and parentheses itself: the fields
  // after the last ')' are plain, starting at field 3 (the state); field 22 is the start time.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
  const state = fields[0]
  const start = fields[22 - 3]
  return state && start && /^\d+$/.test(start) ? { state, start } : undefined
}

/**
 * Our pid namespace, when /proc is the one of our namespace (it shows us under our own pid); undefined
 * when it cannot be told, and then nothing is recorded nor judged.
 */
function ourNamespace(): string | undefined {
  try {
    if (readlinkSync('/proc/self') !== String(process.pid)) return undefined
    return readlinkSync('/proc/self/ns/pid')
  } catch {
    return undefined
  }
}

let namespace: string | undefined | null = null
/** Our pid namespace, read once (it never changes for a process). */
export function pidNamespace(): string | undefined {
  if (namespace === null) namespace = ourNamespace()
  return namespace
}

/**
 * The marks of `pids` (this host's, numbered in our namespace), for a record; undefined when any of them
 * cannot be marked (no /proc, a pid that does not exist): the lease then ends by its ttl alone.
 */
export function markProcesses(pids: readonly number[]): HolderProcesses | undefined {
  const ns = pidNamespace()
  if (ns === undefined || pids.length === 0) return undefined
  const marks: ProcessMark[] = []
  for (const pid of pids) {
    const stat = statOf(pid)
    if (!stat) return undefined
    marks.push({ pid, start: stat.start })
  }
  return { ns, marks }
}

/** Whether this process is certainly gone: no such pid, the pid reused by another process, or a zombie. */
function isGone({ pid, start }: ProcessMark): boolean {
  try {
    process.kill(pid, 0)
  } catch (error) {
    // EPERM: it exists (another user's). Anything else but ESRCH: in doubt, alive.
    return (error as NodeJS.ErrnoException).code === 'ESRCH'
  }
  const stat = statOf(pid)
  // Unreadable (hidepid): in doubt, alive. A zombie runs nothing and holds no descriptor any more.
  if (!stat) return false
  return stat.start !== start || stat.state === 'Z' || stat.state === 'X'
}

/** Whether `value` has the shape of `HolderProcesses` (a record is another process's writing). */
function isHolderProcesses(value: unknown): value is HolderProcesses {
  const v = value as HolderProcesses
  return (
    typeof v?.ns === 'string' &&
    Array.isArray(v.marks) &&
    v.marks.length > 0 &&
    v.marks.every(
      (m) =>
        Number.isSafeInteger(m?.pid) && m.pid > 0 && typeof m.start === 'string' && /^\d+$/.test(m.start),
    )
  )
}

/**
 * Whether a lease can be checked by its processes here: recorded, of this very boot (a kernel boot id),
 * numbered in our pid namespace. Only then may `allGone` be asked.
 */
export function checkable(
  processes: unknown,
  recordBoot: string,
  ourBoot: string,
): processes is HolderProcesses {
  return (
    isHolderProcesses(processes) &&
    recordBoot === ourBoot &&
    hasKernelBootId(ourBoot) &&
    processes.ns === pidNamespace()
  )
}

/** Whether every process the lease lives with is certainly gone (see the header). */
export const allGone = (processes: HolderProcesses): boolean => processes.marks.every(isGone)
