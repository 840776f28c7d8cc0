/**
 * The two small shell processes `fencelock run` works with: the watchdog, which outlives fencelock to stop
 * the command if fencelock dies, and the starter, which runs the command only once the watchdog knows it.
 *
 * Why shell and not a second Node process: the watchdog waits for the whole run, so it must cost next to
 * nothing. A POSIX `sh` takes about 1 MB and 1 ms to start; a Node process took about 44 MB and 0.1-0.3 s
 * of CPU (measured by the bench's `run` scenario). Everything that needs Node (the lock, renewals, the
 * command's group, signals) stays in fencelock; the watchdog only reads a pipe and signals a group.
 *
 * The watchdog (`sh -c WATCHDOG fencelock <kill-after s>`, in a session of its own, ignoring SIGINT, SIGTERM
 * and SIGHUP) is started before the lock is taken, so that its pid can be recorded with the grant: the file
 * backend holds a lease until fencelock AND the watchdog are gone (`holderPids`), and the watchdog outlives
 * the command when fencelock dies. fencelock holds the other end of its fd 3 and writes on it the target to
 * guard (`pgid <n>`: the command's group; `pid <n>` with --foreground) and, once the lock is released,
 * `done`. End-of-file without `done` means fencelock died (SIGKILL, the OOM killer; the kernel closes its
 * end): the watchdog sends SIGTERM to the target, SIGKILL after the grace, and exits only once the target
 * is gone, so the lease, which names it, is held until then (a dead fencelock renews nothing: the ttl
 * still ends it, hence --kill-after below 2/3 of --ttl).
 *
 * The starter (`sh -c STARTER fencelock <file> [args…]`, spawned by fencelock as the new group's leader)
 * waits for `go` on its fd 3, closes it, and execs the command: no extra process. fencelock writes `go`
 * only after it has written the target to the watchdog, both synchronous writes to local sockets, so a
 * fencelock killed at any point leaves either no command started (the starter reads end-of-file and exits)
 * or a watchdog that knows what to stop.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import type { Socket } from 'node:net'

/** The watchdog: see the header. `$1` is the grace in seconds (a decimal). Backslashes doubled: a template. */
const WATCHDOG = `trap '' INT TERM HUP
grace=$1
# Whether the target still runs. A member that has exited stays a zombie until its parent reaps it (init,
# for an orphan; some init processes of containers reap late or never): it runs nothing, so where /proc
# tells, zombies do not count. awk exits 0 for a live member, 1 for none; anything else (a process gone
# while it read the list) counts as running, and the next look decides.
running() {
  kill -0 "$target" 2>/dev/null || return 1
  [ -r /proc/self/stat ] || return 0
  awk -v t="$target" '
    { sub(/.*\\) /, "") }
    $1 != "Z" && (t ~ /^-/ ? "-" $3 == t : FILENAME == "/proc/" t "/stat") { found = 1; exit }
    END { exit !found }' /proc/[0-9]*/stat 2>/dev/null
  [ $? -ne 1 ]
}
target=
while IFS= read -r line; do
  case $line in
    'pgid '*) target=-\${line#pgid } ;;
    'pid '*) target=\${line#pid } ;;
    done) exit 0 ;;
  esac
done <&3
[ -n "$target" ] || exit 0
echo 'fencelock: the fencelock process holding the lock died; stopping the command' >&2
kill -TERM "$target" 2>/dev/null
# The grace: a sleep that holds none of fencelock's descriptors (a pipe reading its stderr would wait for it).
sleep "$grace" >/dev/null 2>&1 &
timer=$!
while running; do
  kill -0 "$timer" 2>/dev/null || kill -KILL "$target" 2>/dev/null
  sleep 0.05
done
kill -KILL "$timer" 2>/dev/null
exit 0`

/** The starter: see the header. `$@` is the command; 126/127 and the message as fencelock gives them. */
const STARTER = `IFS= read -r go <&3 || exit 125
exec 3<&-
if ! command -v "$1" >/dev/null 2>&1; then
  if [ -e "$1" ]; then
    echo "fencelock: cannot run $1: not executable" >&2
    exit 126
  fi
  echo "fencelock: cannot run $1: command not found" >&2
  exit 127
fi
exec "$@"`

/** The shell both run in: POSIX sh, at the one path every Unix has it. */
const SH = '/bin/sh'

/** The end of a child's fd 3 that fencelock holds. */
const pipeOf = (child: ChildProcess): Socket => {
  const pipe = child.stdio[3] as Socket
  pipe.on('error', () => {})
  // Never keeps fencelock alive by itself: the command's child process does that.
  pipe.unref()
  return pipe
}

export interface Watchdog {
  readonly pid: number
  /** Tells the watchdog what to stop if fencelock dies: the command's group, or (foreground) its pid. */
  guard(target: { group: number } | { pid: number }): void
  /** Ends the watch: the lock is released, nothing is left to stop. */
  done(): void
  /** The watchdog's own process, to learn of its death. */
  readonly child: ChildProcess
}

/** Starts the watchdog (see the header); throws when no shell can be started. */
export function startWatchdog(killAfterMs: number): Promise<Watchdog> {
  const child = spawn(SH, ['-c', WATCHDOG, 'fencelock', String(killAfterMs / 1000)], {
    stdio: ['ignore', 'ignore', 'inherit', 'pipe'],
    detached: true,
  })
  const pipe = pipeOf(child)
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('spawn', () => {
      child.removeListener('error', reject)
      child.unref()
      resolve({
        pid: child.pid!,
        child,
        // A write to a local socket with room in it completes before write() returns: the target is in
        // the watchdog's pipe before the starter is told to go (see the header).
        guard: (target) => pipe.write('group' in target ? `pgid ${target.group}\n` : `pid ${target.pid}\n`),
        done: () => {
          pipe.end('done\n')
        },
      })
    })
  })
}

/**
 * Spawns the starter for `command` (see the header): the leader of a new process group unless
 * `foreground`. The command runs once `go()` is called, after the watchdog was told its group.
 */
export function startCommand(
  command: readonly string[],
  env: NodeJS.ProcessEnv,
  foreground: boolean,
): { child: ChildProcess; go(): void } {
  const child = spawn(SH, ['-c', STARTER, 'fencelock', ...command], {
    stdio: ['inherit', 'inherit', 'inherit', 'pipe'],
    detached: !foreground,
    env,
  })
  const pipe = pipeOf(child)
  return { child, go: () => pipe.end('go\n') }
}
