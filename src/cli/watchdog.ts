/**
 * The watchdog `fencelock run` starts its command under: `node watchdog.js <kill-after ms> <file> [args…]`.
 *
 * It leads the command's process group (the wrapper spawns it detached), runs the command in that group,
 * and exits with the command's status. Its one job: if the wrapper dies (SIGKILL, the OOM killer) the lease
 * stops being renewed and will expire, so the command must not go on. The wrapper holds the other end of a
 * pipe on our fd 3; when the wrapper dies, the kernel closes it, we read EOF, and we stop the whole group:
 * SIGTERM at once, SIGKILL after the grace period. A lock lost while the wrapper lives is handled by the
 * wrapper, which signals the group itself.
 *
 * It ignores SIGTERM, SIGINT and SIGHUP (they are meant for the command, which is in the same group and
 * gets them directly), so that it outlives the command and reports its status.
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

for (const s of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(s, () => {})

const child = spawn(file, args, { stdio: 'inherit' })
let exited = false

child.once('error', (error: NodeJS.ErrnoException) => {
  exited = true
  process.stderr.write(`fencelock: cannot run ${file}: ${error.message}\n`)
  process.exit(error.code === 'ENOENT' ? 127 : 126)
})
child.once('exit', (code, signal) => {
  exited = true
  process.exit(code ?? 128 + (signal ? constants.signals[signal] : 0))
})

/** Signals our process group (ourselves included: we ignore SIGTERM; SIGKILL ends us too, last). */
const signalGroup = (signal: NodeJS.Signals) => {
  try {
    process.kill(-process.pid, signal)
  } catch {}
}

// A stream socket over the pipe (not an fs read stream: a blocking read in the thread pool would hold up
// our own exit).
const wrapper = new Socket({ fd: 3, readable: true, writable: false })
wrapper.on('data', () => {})
wrapper.on('error', () => {})
wrapper.once('close', () => {
  if (exited) return
  process.stderr.write('fencelock: the fencelock process holding the lock died; stopping the command\n')
  signalGroup('SIGTERM')
  setTimeout(() => signalGroup('SIGKILL'), killAfterMs).unref()
})
