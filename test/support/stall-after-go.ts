/**
 * Preloaded into a `fencelock run` by a test (`NODE_OPTIONS=--import=<this file>`): right after fencelock
 * lets the command start (it writes `go` to the starter, see src/cli/watchdog.ts), it stalls until the
 * file named by $FENCELOCK_TEST_RESUME exists, as a process descheduled at that very instant on a loaded
 * machine (the starter it just woke may take the CPU). A signal sent meanwhile meets whatever handlers
 * fencelock had in place when the command could start.
 */
import { existsSync } from 'node:fs'
import { Socket } from 'node:net'

const resume = process.env.FENCELOCK_TEST_RESUME
/** The longest stall: a test that never writes the file fails by its own assertions, not by a hang. */
const STALL_MAX_MS = 60_000
const end = Socket.prototype.end

Socket.prototype.end = function (this: Socket, ...args: unknown[]) {
  const result = (end as (...a: unknown[]) => Socket).apply(this, args)
  if (resume !== undefined && args[0] === 'go\n') {
    // A synchronous wait: no event (a signal's listener included) is handled before it ends.
    const pause = new Int32Array(new SharedArrayBuffer(4))
    const until = Date.now() + STALL_MAX_MS
    while (!existsSync(resume) && Date.now() < until) Atomics.wait(pause, 0, 0, 10)
  }
  return result
} as typeof end
