import { spawn } from 'node:child_process'
import { constants } from 'node:os'
import { parseDuration } from '../core/durations.js'
import { COMMON_OPTIONS, type ParsedOptions, UsageError } from './args.js'
import { holderOf, onLockLost, open, parseCommand, showWaiting, timeoutOf } from './context.js'
import { EXIT } from './exit-codes.js'
import { groupRunning } from './process-group.js'
import { startCommand, startWatchdog, type Watchdog } from './watchdog.js'

export const RUN_HELP = `Usage: fencelock run <key> [options] -- <command> [args...]

Takes the lock <key>, runs <command> while holding it (renewing the lease), releases it when the
command ends, and exits with the command's status. The command gets FENCELOCK_KEY and FENCELOCK_FENCE in its
environment: pass FENCELOCK_FENCE to whatever you write, so it can reject a stale holder.
The command runs in a process group of its own (as with timeout(1)), and the lock is held until every
process of that group has exited, background children included (as flock(1) holds its lock until the
last process holding it exits). Ctrl-C, SIGTERM and SIGHUP go to the whole group, and SIGKILL follows
after --kill-after for whatever ignores them. If the lock is lost while it runs, the group gets SIGTERM,
then SIGKILL after --kill-after; if fencelock itself dies (SIGKILL, the OOM killer), a watchdog stops the
group the same way, before the unrenewed lease expires (keep --kill-after below 2/3 of --ttl for that).

Options:
  --url <url>          backend URL (default: $FENCELOCK_URL, else this host's shared lock folder: see
                       fencelock --help); memory: is refused (it cannot work across processes)
  --ttl <duration>     lease length, renewed every ttl/3 (default: 30s)
  --timeout <duration> how long to wait for the lock (default: forever; 0 = try once)
  --kill-after <dur>   grace between SIGTERM and SIGKILL when the lock is lost (default: 10s)
  --foreground         run the command in fencelock's own process group, so it can read the terminal and get
                       its signals; then only the command itself (not its children) is stopped on loss
  --holder <text>      who holds the lock, as inspect and waiters show it
                       (default: "<host> (pid <pid>, \`<command>\`)")
  -v, --verbose        say on stderr when waiting and acquiring even when stderr is not a terminal
  -h, --help           this help

Exit codes: the command's own; 64 usage, 69 backend unavailable, 75 not acquired within --timeout,
76 lock lost while running, 126 command not executable, 127 command not found.`

export async function runCommand(argv: string[]): Promise<number> {
  const split = argv.indexOf('--')
  const own = split === -1 ? argv : argv.slice(0, split)
  const command = split === -1 ? [] : argv.slice(split + 1)
  const parsed = parseCommand(
    own,
    {
      ...COMMON_OPTIONS,
      'kill-after': { type: 'string' },
      foreground: { type: 'boolean' },
      holder: { type: 'string' },
    },
    RUN_HELP,
  )
  if (parsed === undefined) return EXIT.ok
  const { values, positionals } = parsed
  const [key, ...extra] = positionals
  if (key === undefined)
    throw new UsageError('missing <key>; usage: fencelock run <key> [options] -- <command>')
  if (extra.length > 0 || command.length === 0) {
    throw new UsageError(
      `put the command after "--": fencelock run ${key} -- ${[...extra, ...command].join(' ') || '<command>'}`,
    )
  }
  const killAfterMs = parseDuration('--kill-after', values['kill-after'] ?? '10s')
  // Started first: the file backend records its pid with the grant, beside ours (see watchdog.ts).
  const watchdog = process.platform === 'win32' ? undefined : await startWatchdog(killAfterMs)
  try {
    return await runLocked(key, command, values, killAfterMs, watchdog)
  } finally {
    watchdog?.done()
  }
}

/** `run` once its arguments are read and its watchdog (if any) started. */
async function runLocked(
  key: string,
  command: string[],
  values: ParsedOptions,
  killAfterMs: number,
  watchdog: Watchdog | undefined,
): Promise<number> {
  const timeout = timeoutOf(values)
  const verbose = values.verbose === true
  const holderPids = watchdog ? [process.pid, watchdog.pid] : undefined
  const opened = await open(values, holderOf(command), holderPids)
  const interrupted = new AbortController()
  const onSignal = (signal: NodeJS.Signals) => interrupted.abort(signal)
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  try {
    const stopStatus = showWaiting(opened.client, key, verbose)
    let lock: Awaited<ReturnType<typeof opened.client.acquire>>
    try {
      lock = await opened.client.acquire(key, {
        ...(timeout === undefined ? {} : { timeout }),
        signal: interrupted.signal,
      })
    } catch (error) {
      if (interrupted.signal.aborted)
        return 128 + constants.signals[interrupted.signal.reason as NodeJS.Signals]
      throw error
    } finally {
      stopStatus()
    }
    if (verbose) process.stderr.write(`fencelock: acquired ${key} (fence ${lock.fence})\n`)
    const job = runChild(command, lock, killAfterMs, values.foreground === true, watchdog)
    // Only now that runChild listens: a signal meeting no listener would kill us outright.
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
    const status = await job
    await lock.release().catch((error: Error) => {
      process.stderr.write(`fencelock: ${error.message}\n`)
    })
    if (lock.signal.aborted) {
      process.stderr.write(`fencelock: ${(lock.signal.reason as Error).message}\n`)
      return EXIT.lost
    }
    return status
  } finally {
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
    await opened.close()
  }
}

/**
 * Runs the command with the fence in its environment; resolves with its exit status, shell-style.
 * By default the command leads a process group of its own (started through the starter, ./watchdog.ts),
 * and this resolves only once that whole group is gone: the lock is released after the last process the
 * command started, as flock(1)'s lock lives as long as the last holder of its descriptor. A lost lock stops
 * the whole group, and so does the watchdog if this process dies. A signal to us (Ctrl-C, SIGTERM, SIGHUP)
 * goes to the group, and SIGKILL follows after `killAfterMs` for whatever of it is left (a grandchild that
 * ignores it). `foreground` keeps the command in our group (a terminal program needs that) and signals the
 * command alone. Without a watchdog (Windows: no POSIX shell, no process groups) the command is spawned
 * directly, in the foreground's way.
 */
function runChild(
  command: string[],
  lock: { key: string; fence: bigint; signal: AbortSignal },
  killAfterMs: number,
  foreground: boolean,
  watchdog: Watchdog | undefined,
): Promise<number> {
  return new Promise((resolve) => {
    const [file, ...args] = command as [string, ...string[]]
    const env = { ...process.env, FENCELOCK_KEY: lock.key, FENCELOCK_FENCE: lock.fence.toString() }
    const started = watchdog
      ? startCommand(command, env, foreground)
      : { child: spawn(file, args, { stdio: 'inherit', env }), go: () => {} }
    const { child } = started
    /** The command's process group (its starter leads it), unless it runs in ours. */
    const group = foreground || !watchdog ? undefined : child.pid
    // A watchdog killed while we waited for the lock: the command never starts (the starter waits for a
    // `go`, and the stop below ends it).
    const watchdogGone =
      watchdog !== undefined && (watchdog.child.exitCode !== null || watchdog.child.signalCode !== null)
    const send = (signal: NodeJS.Signals | 0): boolean => {
      try {
        if (group === undefined) return child.kill(signal)
        process.kill(-group, signal)
        return true
      } catch {
        return false
      }
    }
    let killTimer: NodeJS.Timeout | undefined
    const stop = (signal: NodeJS.Signals) => {
      send(signal)
      killTimer ??= setTimeout(() => send('SIGKILL'), killAfterMs)
    }
    const onLost = () => stop('SIGTERM')
    onLockLost(lock, onLost)
    // Without its watchdog, the command would go on unguarded should we die: stop it, as for a lost lock.
    const onWatchdogGone = () => {
      process.stderr.write('fencelock: the watchdog process exited; stopping the command\n')
      stop('SIGTERM')
    }
    if (watchdogGone) onWatchdogGone()
    else watchdog?.child.once('exit', onWatchdogGone)
    // Signals meant for the job go to the job; we release once all of it has ended. Listening before the
    // command may start: a Ctrl-C with no listener would kill us, leaving the job to the watchdog's SIGTERM
    // and the lease to its ttl (a loaded host can run the command before our next statement).
    const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']
    for (const s of signals) process.on(s, stop)
    if (child.pid !== undefined && !watchdogGone) {
      // The watchdog knows what to stop before the command may start (see watchdog.ts).
      watchdog?.guard(group === undefined ? { pid: child.pid } : { group })
      started.go()
    }
    let pollTimer: NodeJS.Timeout | undefined
    const done = (status: number) => {
      clearTimeout(killTimer)
      clearTimeout(pollTimer)
      lock.signal.removeEventListener('abort', onLost)
      watchdog?.child.removeListener('exit', onWatchdogGone)
      for (const s of signals) process.removeListener(s, stop)
      resolve(status)
    }
    child.once('error', (error: NodeJS.ErrnoException) => {
      process.stderr.write(`fencelock: cannot run ${file}: ${error.message}\n`)
      done(error.code === 'ENOENT' ? EXIT.notFound : EXIT.cannotExecute)
    })
    child.once('exit', (code, signal) => {
      const status = code ?? 128 + (signal ? constants.signals[signal] : 0)
      // The command's children may still run in its group: the lock is theirs too until they end. Most
      // looks cost one kill(-g, 0); the /proc walk that tells zombies apart runs every tenth look.
      let looks = 0
      const poll = () => {
        const running =
          group !== undefined && (looks++ % ZOMBIE_CHECK_EVERY === 0 ? groupRunning(group, send) : send(0))
        if (running) pollTimer = setTimeout(poll, GROUP_POLL_MS)
        else done(status)
      }
      poll()
    })
  })
}

/** How often the command's group is checked for members once the command has exited (one kill(-g, 0)). */
const GROUP_POLL_MS = 50
/** Every how many looks the group's members are read from /proc, so that zombies alone end the wait. */
const ZOMBIE_CHECK_EVERY = 10
