/**
 * The watchdog `fencelock run` starts its command under: `node watchdog.js <kill-after ms> <file> [args…]`.
 *
 * It starts the command as the leader of a process group of its own and exits only once that whole group
 * is gone, the command's children included, with the command's status: the wrapper releases the lock when
 * the watchdog exits, so nothing the command started runs without the lock, as with flock(1), whose lock
 * lives until the last process holding its descriptor exits. It tells the wrapper the group's id on fd 3
 * (`pgid <n>` and a newline), so the wrapper's signals reach the group.
 *
 * Its other job: if the wrapper dies (SIGKILL, the OOM killer) the lease stops being renewed and will
 * expire, so the command must not go on. The wrapper holds the other end of fd 3; when the wrapper dies,
 * the kernel closes it, we read EOF, and we stop the group: SIGTERM at once, SIGKILL after the grace.
 *
 * It is in a session of its own (the wrapper spawns it detached) and ignores SIGTERM, SIGINT and SIGHUP,
 * which the wrapper forwards to the command's group.
 */
import { spawn } from 'node:child_process'
import { Socket } from 'node:net'
import { constants } from 'node:os'

const [killAfterText, file, ...args] = process.argv.slice(2)
const killAfterMs = Number(killAfterText)
if (!file || !Number.isFinite(killAfterMs)) {
  process.stderr.write('fencelock watchdog: usage: watchdog.js <kill-after ms> <file> [args...]\n')
  process.exit(64)
}

/** How often the group is checked for members once the command has exited (kill(-pgid, 0) is a syscall). */
const GROUP_POLL_MS = 50

for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(s, () => {})

// A stream socket over the pipe (not an fs read stream: a blocking read in the thread pool would hold up
// our own exit).
const wrapper = new Socket({ fd: 3, readable: true, writable: true })
wrapper.on('data', () => {})
wrapper.on('error', () => {})

// detached: the command leads a new process group (and session), so its pid names the whole group.
const child = spawn(file, args, { stdio: 'inherit', detached: true })
const group = child.pid
let status: number | undefined

/** Signals the command's group; false once the group is gone. */
const signalGroup = (signal: NodeJS.Signals | 0): boolean => {
  if (group === undefined) return false
  try {
    process.kill(-group, signal)
    return true
  } catch {
    return false
  }
}

if (group !== undefined) wrapper.write(`pgid ${group}\n`)

child.once('error', (error: NodeJS.ErrnoException) => {
  process.stderr.write(`fencelock: cannot run ${file}: ${error.message}\n`)
  process.exit(error.code === 'ENOENT' ? 127 : 126)
})
child.once('exit', (code, signal) => {
  status = code ?? 128 + (signal ? constants.signals[signal] : 0)
  // The command's children may still run in its group: the lock is theirs too until they end.
  const poll = () => (signalGroup(0) ? setTimeout(poll, GROUP_POLL_MS) : process.exit(status))
  poll()
})

wrapper.once('close', () => {
  process.stderr.write('fencelock: the fencelock process holding the lock died; stopping the command\n')
  signalGroup('SIGTERM')
  setTimeout(() => signalGroup('SIGKILL'), killAfterMs).unref()
})
