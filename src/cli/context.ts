import { hostname } from 'node:os'
import { createLockClient } from '../client.js'
import type { LockBackend, LockInfo } from '../core/backend.js'
import type { LockClient } from '../core/client.js'
import { parseDuration } from '../core/durations.js'
import type { Lock } from '../core/lock.js'
import { parseHolder, toHolder } from '../core/options.js'
import { loadBackend } from '../schemes.js'
import { type ParsedOptions, parse, parseCliUrl, resolveUrl, UsageError } from './args.js'

export interface Opened {
  readonly backend: LockBackend
  readonly client: LockClient
  close(): Promise<void>
}

/**
 * Opens the backend eagerly, so a bad URL or a missing driver fails before anything else happens.
 * `holderPids`: the processes a file lease lives with (`run`: ours and its watchdog's), where the backend
 * is a lock folder; other backends know nothing of processes.
 */
export async function open(
  values: ParsedOptions,
  holder?: string,
  holderPids?: readonly number[],
): Promise<Opened> {
  const url = parseCliUrl(resolveUrl(values))
  const ttl = values.ttl === undefined ? undefined : parseDuration('--ttl', values.ttl, { min: 10 })
  const described = values.holder === undefined ? holder : parseHolder(values.holder, '--holder')
  const backend =
    holderPids !== undefined && url.protocol === 'file:'
      ? (await import('../backends/file/index.js')).fromUrl(url, { holderPids })
      : await loadBackend(url)
  const client = createLockClient(backend, { ttl, holder: described })
  return {
    backend,
    client,
    // The client closes the backend too, within its bound (a second, unbounded close of a backend whose
    // server never answered could hold the command past its timeout).
    close: () => client.close(),
  }
}

/**
 * Parses a command's `argv` against `options`; with --help prints `help` and returns undefined (the
 * command then exits 0).
 */
export function parseCommand(
  argv: string[],
  options: Parameters<typeof parse>[1],
  help: string,
): ReturnType<typeof parse> | undefined {
  const parsed = parse(argv, options)
  if (!parsed.values.help) return parsed
  process.stdout.write(`${help}\n`)
  return undefined
}

/** The one <key> a command takes (hold, inspect). @throws {UsageError} with `usage` for none or more */
export function onlyKey(positionals: string[], usage: string): string {
  const [key, ...extra] = positionals
  if (key === undefined || extra.length > 0) throw new UsageError(usage)
  return key
}

/** Opens the backend (see `open`), runs `body` with it, and closes it whatever `body` does. */
export async function withOpened<T>(
  values: ParsedOptions,
  holder: string | undefined,
  body: (opened: Opened) => Promise<T>,
): Promise<T> {
  const opened = await open(values, holder)
  try {
    return await body(opened)
  } finally {
    await opened.close()
  }
}

/**
 * The CLI's holder description: "<host> (pid <pid>, `<command>`)", the command quoted as a shell would
 * need it, so an operator who sees a lock held knows what runs and where.
 */
export function holderOf(command?: readonly string[]): string {
  const line = command
    ?.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`))
    .join(' ')
  return toHolder(`${hostname()} (pid ${process.pid}${line === undefined ? '' : `, \`${line}\``})`)
}

export function timeoutOf(values: ParsedOptions): number | undefined {
  if (values.timeout === undefined) return undefined
  return parseDuration('--timeout', values.timeout, { allowInfinity: true })
}

const jsonSafe = (_key: string, value: unknown) => (typeof value === 'bigint' ? value.toString() : value)

/** One JSON line on stdout; bigints (fences) as decimal strings. */
export function printJson(value: object): void {
  process.stdout.write(`${JSON.stringify(value, jsonSafe)}\n`)
}

/**
 * Calls `onLost` once when `lock` is lost, at once if it is already. The signal is read ONCE: a read past
 * validUntil aborts it, so a second read (to add the listener after checking `aborted`) can abort it in
 * between, and an aborted signal never calls a listener added later (a holder paused at that instant by
 * SIGSTOP never heard of its loss).
 */
export function onLockLost(lock: Pick<Lock, 'signal'>, onLost: () => void): void {
  const signal = lock.signal
  if (signal.aborted) onLost()
  else signal.addEventListener('abort', onLost, { once: true })
}

/** Seconds with one decimal: "4.5 s". */
const seconds = (ms: number) => `${(Math.max(0, ms) / 1000).toFixed(1)} s`

/**
 * While an acquire waits: on a TTY, one status line on stderr kept up to date ("waiting for <key>, held by
 * <holder>, fence 17; waited 4.5 s; lease ends in 25.5 s"); with --verbose elsewhere, one plain line when
 * waiting starts. Silent otherwise. Every number says what it counts.
 */
export function showWaiting(client: LockClient, key: string, verbose: boolean): () => void {
  const tty = process.stderr.isTTY === true
  if (!tty && !verbose) return () => {}
  const started = performance.now()
  let holder = ''
  /** When the holder's lease ends unless renewed (performance.now()), as the latest inspect said. */
  let leaseEnds: number | undefined
  let unreachable: string | undefined
  let stopped = false
  const describe = async () => {
    try {
      const info = await client.inspect(key, { signal: AbortSignal.timeout(2000) })
      unreachable = undefined
      holder = info.held ? `, ${describeHolder(info)}` : ''
      leaseEnds =
        info.held && info.expiresInMs !== undefined ? performance.now() + info.expiresInMs : undefined
    } catch (error) {
      // Never let an outage look like contention: say the store cannot be reached, and why.
      unreachable = reasonOf(error)
    }
  }
  // The reason may carry its own parentheses ("connection refused at … (is the server running?)"): it
  // goes after a colon, not inside more of them.
  const line = (waited: string) => {
    if (unreachable !== undefined) return `store unreachable: ${unreachable}; retrying ${key}${waited}`
    const lease = leaseEnds === undefined ? '' : `; lease ends in ${seconds(leaseEnds - performance.now())}`
    return `waiting for ${key}${holder}${waited}${lease}`
  }
  if (!tty) {
    const timer = setTimeout(() => {
      void describe().then(() => {
        if (!stopped) process.stderr.write(`fencelock: ${line('')}\n`)
      })
    }, 200)
    timer.unref()
    return () => {
      stopped = true
      clearTimeout(timer)
    }
  }
  let ticks = 0
  const draw = () => {
    if (ticks++ % 4 === 0) void describe()
    process.stderr.write(`\r\x1b[K${line(`; waited ${seconds(performance.now() - started)}`)}`)
  }
  const timer = setInterval(draw, 250)
  timer.unref()
  return () => {
    clearInterval(timer)
    if (ticks > 0) process.stderr.write('\r\x1b[K')
  }
}

/**
 * "held by build-7 (pid 4121, `./deploy.sh`), fence 17": the holder's description when the store keeps
 * one (made printable: another process wrote it), else its owner id.
 */
export function describeHolder(info: LockInfo): string {
  const who = info.holder === undefined ? (info.owner ?? 'unknown') : toHolder(info.holder)
  return `held by ${who}${info.fence === undefined ? '' : `, fence ${info.fence}`}`
}

/** The plain reason of a store failure: what its message says after naming the lock and the store. */
export function reasonOf(error: unknown): string {
  const message = String((error as Error)?.message ?? error)
  const i = message.indexOf(': ')
  return i >= 0 ? message.slice(i + 2) : message
}
