import { spawn } from 'node:child_process'
import { constants } from 'node:os'
import { fileURLToPath } from 'node:url'
import { parseDuration } from '../core/durations.js'
import { COMMON_OPTIONS, UsageError } from './args.js'
import { holderOf, open, parseCommand, showWaiting, timeoutOf } from './context.js'
import { EXIT } from './exit-codes.js'

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
  const timeout = timeoutOf(values)
  const verbose = values.verbose === true
  const opened = await open(values, holderOf(command))
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
    process.removeListener('SIGINT', onSignal)
    process.removeListener('SIGTERM', onSignal)
    const status = await runChild(command, lock, killAfterMs, values.foreground === true)
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
 * By default under the watchdog (./watchdog.ts), which starts the command as the leader of a process group
 * and exits only once that whole group is gone: the lock is released after the last process the command
 * started, as flock(1)'s lock lives as long as the last holder of its descriptor. A lost lock stops the
 * whole group, and so does the watchdog if this process dies. A signal to us (Ctrl-C, SIGTERM, SIGHUP) goes
 * to the group, and SIGKILL follows after `killAfterMs` for whatever of it is left (a grandchild that
 * ignores it). `foreground` keeps the command in our group (a terminal program needs that) and signals
 * the command alone.
 */
function runChild(
  command: string[],
  lock: { key: string; fence: bigint; signal: AbortSignal },
  killAfterMs: number,
  foreground: boolean,
): Promise<number> {
  return new Promise((resolve) => {
    const [file, ...args] = command as [string, ...string[]]
    const env = { ...process.env, FENCELOCK_KEY: lock.key, FENCELOCK_FENCE: lock.fence.toString() }
    const child = foreground
      ? spawn(file, args, { stdio: 'inherit', env })
      : spawn(process.execPath, [WATCHDOG, String(killAfterMs), file, ...args], {
          // fd 3: the watchdog tells us the command's group on it, and watches it for EOF (we died).
          stdio: ['inherit', 'inherit', 'inherit', 'pipe'],
          detached: true,
          env,
        })
    // The watchdog's pipe must not keep this process alive once the command has ended (nor before: the
    // child process itself does that).
    const pipe = child.stdio[3] as
      | (NodeJS.ReadableStream & { unref?: () => void; destroy?: () => void })
      | null
    pipe?.unref?.()
    /** The command's process group, once the watchdog has said it; signals before that wait for it. */
    let group: number | undefined
    const pending: NodeJS.Signals[] = []
    let said = ''
    pipe?.on('data', (chunk: Buffer) => {
      said += chunk.toString()
      const match = /pgid (\d+)\n/.exec(said)
      if (group !== undefined || !match) return
      group = Number(match[1])
      for (const signal of pending.splice(0)) send(signal)
    })
    pipe?.on('error', () => {})
    const send = (signal: NodeJS.Signals) => {
      if (!foreground && group === undefined) {
        pending.push(signal)
        return
      }
      try {
        if (foreground || group === undefined) child.kill(signal)
        else process.kill(-group, signal)
      } catch {}
    }
    let killTimer: NodeJS.Timeout | undefined
    const stop = (signal: NodeJS.Signals) => {
      send(signal)
      killTimer ??= setTimeout(() => send('SIGKILL'), killAfterMs)
    }
    const onLost = () => stop('SIGTERM')
    // Read past its validity (a stalled event loop), the signal is aborted already: no event will come.
    if (lock.signal.aborted) onLost()
    else lock.signal.addEventListener('abort', onLost, { once: true })
    // Signals meant for the job go to the job; we release once all of it has ended.
    const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']
    for (const s of signals) process.on(s, stop)
    const done = (status: number) => {
      clearTimeout(killTimer)
      lock.signal.removeEventListener('abort', onLost)
      for (const s of signals) process.removeListener(s, stop)
      pipe?.destroy?.()
      resolve(status)
    }
    child.once('error', (error: NodeJS.ErrnoException) => {
      process.stderr.write(`fencelock: cannot run ${file}: ${error.message}\n`)
      done(error.code === 'ENOENT' ? EXIT.notFound : EXIT.cannotExecute)
    })
    child.once('exit', (code, signal) => {
      done(code ?? 128 + (signal ? constants.signals[signal] : 0))
    })
  })
}

/** The watchdog script, beside this file once compiled. */
const WATCHDOG = fileURLToPath(new URL('./watchdog.js', import.meta.url))
