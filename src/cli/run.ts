import { spawn } from 'node:child_process'
import { constants } from 'node:os'
import { parseDuration } from '../core/durations.js'
import { COMMON_OPTIONS, type ParsedOptions, UsageError } from './args.js'
import { holderOf, type Opened, onLockLost, open, parseCommand, showWaiting, timeoutOf } from './context.js'
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
  --limit <n>          make <key> a semaphore of n permits: up to n commands run at once, on every host
                       that uses the store (every one must give the same n); the command gets
                       FENCELOCK_SEMAPHORE, FENCELOCK_PERMITS and FENCELOCK_SEQUENCE (an order, not a fence)
  --permits <k>        with --limit, how many of its permits this command takes at once (default: 1)
  -v, --verbose        say on stderr when waiting and acquiring even when stderr is not a terminal
  -h, --help           this help

Exit codes: the command's own; 64 usage, 69 backend unavailable, 75 not acquired within --timeout,
76 lock lost while running, 126 command not executable, 127 command not found.`

export async function runCommand(argv: string[]): Promise<number> {
  const job = parseJob('run', argv, { limit: { type: 'string' }, permits: { type: 'string' } }, RUN_HELP)
  if (job === undefined) return EXIT.ok
  const permits = permitsOf(job.values)
  return withWatchdog(job.killAfterMs, (watchdog) =>
    permits
      ? runWithPermits(job.name, job.command, job.values, job.killAfterMs, watchdog, permits)
      : runLocked(job.name, job.command, job.values, job.killAfterMs, watchdog),
  )
}

/** --limit and --permits, checked; undefined without --limit. @throws {UsageError} */
function permitsOf(values: ParsedOptions): { limit: number; permits: number } | undefined {
  const whole = (flag: string, raw: unknown): number => {
    const n = Number(raw)
    if (typeof raw !== 'string' || !/^[0-9]+$/.test(raw) || n < 1) {
      throw new UsageError(`${flag} must be a whole number of at least 1, got ${JSON.stringify(raw)}`)
    }
    return n
  }
  if (values.limit === undefined) {
    if (values.permits !== undefined)
      throw new UsageError('--permits needs --limit: how many permits the semaphore has')
    return undefined
  }
  const limit = whole('--limit', values.limit)
  const permits = values.permits === undefined ? 1 : whole('--permits', values.permits)
  if (permits > limit)
    throw new UsageError(`--permits ${permits} is more than --limit ${limit}: it could never run`)
  return { limit, permits }
}

/** `run --limit`: the command runs holding permits of the semaphore <key>. */
function runWithPermits(
  name: string,
  command: string[],
  values: ParsedOptions,
  killAfterMs: number,
  watchdog: Watchdog | undefined,
  { limit, permits }: { limit: number; permits: number },
): Promise<number> {
  const timeout = timeoutOf(values)
  return runHolding(command, values, killAfterMs, watchdog, async (opened, signal) => {
    if (values.verbose === true)
      process.stderr.write(`fencelock: waiting for ${permits} of ${limit} permits of ${name}\n`)
    const held = await opened.client
      .semaphore(name, { limit })
      .acquire({ permits, signal, ...(timeout === undefined ? {} : { timeout }) })
    return {
      signal: held.signal,
      env: {
        FENCELOCK_SEMAPHORE: name,
        FENCELOCK_PERMITS: String(held.permits),
        FENCELOCK_SEQUENCE: held.sequence.toString(),
      },
      said: `holding ${held.permits} of ${limit} permits of ${name} (sequence ${held.sequence})`,
      release: () => held.release(),
    }
  })
}

/** A command line of `run` or `elect`: the name, the options, and the command after `--`. */
export interface Job {
  readonly name: string
  readonly command: string[]
  readonly values: ParsedOptions
  readonly killAfterMs: number
}

/**
 * Reads `fencelock <verb> <name> [options] -- <command>`; undefined after printing `help` (--help).
 * @throws {UsageError} for a missing name or command
 */
export function parseJob(
  verb: string,
  argv: string[],
  extra: Parameters<typeof parseCommand>[1],
  help: string,
): Job | undefined {
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
      ...extra,
    },
    help,
  )
  if (parsed === undefined) return undefined
  const { values, positionals } = parsed
  const [name, ...rest] = positionals
  const what = verb === 'elect' ? '<election>' : '<key>'
  if (name === undefined)
    throw new UsageError(`missing ${what}; usage: fencelock ${verb} ${what} [options] -- <command>`)
  if (rest.length > 0 || command.length === 0) {
    throw new UsageError(
      `put the command after "--": fencelock ${verb} ${name} -- ${[...rest, ...command].join(' ') || '<command>'}`,
    )
  }
  const killAfterMs = parseDuration('--kill-after', values['kill-after'] ?? '10s')
  return { name, command, values, killAfterMs }
}

/** Runs `body` with a watchdog started (none on Windows), and ends the watchdog after it. */
export async function withWatchdog<T>(
  killAfterMs: number,
  body: (watchdog: Watchdog | undefined) => Promise<T>,
): Promise<T> {
  // Started first: the file backend records its pid with the grant, beside ours (see watchdog.ts).
  const watchdog = process.platform === 'win32' ? undefined : await startWatchdog(killAfterMs)
  try {
    return await body(watchdog)
  } finally {
    watchdog?.done()
  }
}

/** What `run` and `elect` hold while their command runs: a lock, or a leadership. */
export interface Holding {
  /** Aborts when the lock or the leadership is lost. */
  readonly signal: AbortSignal
  /** The command's environment additions (FENCELOCK_KEY and FENCELOCK_FENCE, or the election's). */
  readonly env: Readonly<Record<string, string>>
  /** What --verbose says once it is held: "acquired deploy (fence 7)". */
  readonly said: string
  release(): Promise<void>
}

/** `run` once its arguments are read and its watchdog (if any) started. */
function runLocked(
  key: string,
  command: string[],
  values: ParsedOptions,
  killAfterMs: number,
  watchdog: Watchdog | undefined,
): Promise<number> {
  const timeout = timeoutOf(values)
  const verbose = values.verbose === true
  return runHolding(command, values, killAfterMs, watchdog, async (opened, signal) => {
    const stopStatus = showWaiting(opened.client, key, verbose)
    try {
      const lock = await opened.client.acquire(key, { ...(timeout === undefined ? {} : { timeout }), signal })
      return {
        signal: lock.signal,
        env: { FENCELOCK_KEY: lock.key, FENCELOCK_FENCE: lock.fence.toString() },
        said: `acquired ${key} (fence ${lock.fence})`,
        release: () => lock.release(),
      }
    } finally {
      stopStatus()
    }
  })
}

/**
 * Takes what `take` takes (a Ctrl-C or SIGTERM while it waits ends the wait, exiting 128 + the signal),
 * runs the command while it is held (see runChild), then releases it and exits with the command's status,
 * or 76 when it was lost meanwhile.
 */
export async function runHolding(
  command: string[],
  values: ParsedOptions,
  killAfterMs: number,
  watchdog: Watchdog | undefined,
  take: (opened: Opened, signal: AbortSignal) => Promise<Holding>,
): Promise<number> {
  const holderPids = watchdog ? [process.pid, watchdog.pid] : undefined
  const opened = await open(values, holderOf(command), holderPids)
  const interrupted = new AbortController()
  const onSignal = (signal: NodeJS.Signals) => interrupted.abort(signal)
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  try {
    let held: Holding
    try {
      held = await take(opened, interrupted.signal)
    } catch (error) {
      if (interrupted.signal.aborted)
        return 128 + constants.signals[interrupted.signal.reason as NodeJS.Signals]
      throw error
    }
    if (values.verbose === true) process.stderr.write(`fencelock: ${held.said}\n`)
    const job = runChild(command, held, killAfterMs, values.foreground === true, watchdog)
    // Only now that runChild listens: a signal meeting no listener would kill us outright.
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
    const status = await job
    await held.release().catch((error: Error) => {
      process.stderr.write(`fencelock: ${error.message}\n`)
    })
    if (held.signal.aborted) {
      process.stderr.write(`fencelock: ${(held.signal.reason as Error).message}\n`)
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
 * Runs the command with the fence (or term) in its environment; resolves with its exit status, shell-style.
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
  lock: Pick<Holding, 'signal' | 'env'>,
  killAfterMs: number,
  foreground: boolean,
  watchdog: Watchdog | undefined,
): Promise<number> {
  return new Promise((resolve) => {
    const [file, ...args] = command as [string, ...string[]]
    const env = { ...process.env, ...lock.env }
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
