/**
 * Processes the tests start: the compiled CLI (run to its end, or `hold` kept running), and a wait for a
 * process to be gone.
 */
import {
  type ChildProcessWithoutNullStreams,
  type ExecFileOptions,
  execFile,
  spawn,
} from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { waitUntil } from './wait.js'

/** The compiled CLI, as the tests run it (tests are compiled to build/, beside build/src). */
export const CLI = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url))

export interface HoldProcess {
  readonly child: ChildProcessWithoutNullStreams
  /** The JSON lines the child printed, in order. */
  readonly events: Array<Record<string, unknown>>
  /** Resolves with the next event of this name. */
  next(event: string, timeoutMs?: number): Promise<Record<string, unknown>>
  /** Resolves with the exit code (or 128 + signal). */
  readonly exited: Promise<number>
  send(line: string): void
}

/** Starts `fencelock hold <key>` in its own process. */
export function startHold(url: string, key: string, args: string[] = []): HoldProcess {
  const child = spawn(process.execPath, [CLI, 'hold', key, '--url', url, ...args], { stdio: 'pipe' })
  const events: Array<Record<string, unknown>> = []
  const waiters: Array<() => void> = []
  let stderr = ''
  child.stderr.on('data', (chunk) => {
    stderr += chunk
  })
  createInterface({ input: child.stdout }).on('line', (line) => {
    events.push(JSON.parse(line) as Record<string, unknown>)
    for (const wake of waiters.splice(0)) wake()
  })
  const exited = new Promise<number>((resolve) => {
    child.on('exit', (code, signal) => {
      resolve(code ?? (signal === 'SIGKILL' ? 137 : 128))
      for (const wake of waiters.splice(0)) wake()
    })
  })
  return {
    child,
    events,
    exited,
    send: (line) => child.stdin.write(`${line}\n`),
    next(event, timeoutMs = 20_000) {
      const started = Date.now()
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = events.find((e) => e.event === event)
          if (found) return resolve(found)
          if (child.exitCode !== null || child.signalCode !== null) {
            return reject(
              new Error(
                `fencelock hold exited (${child.exitCode ?? child.signalCode}) before "${event}": ${stderr}`,
              ),
            )
          }
          if (Date.now() - started > timeoutMs)
            return reject(
              new Error(`no "${event}" within ${timeoutMs} ms (${processState(child.pid)}): ${stderr}`),
            )
          waiters.push(check)
          setTimeout(check, 200).unref()
        }
        check()
      })
    },
  }
}

/** What the kernel says of `pid` (run state and wait channel), for a test's failure message. */
function processState(pid: number | undefined): string {
  try {
    const state = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '')[0]
    const wchan = readFileSync(`/proc/${pid}/wchan`, 'utf8')
    return `process ${pid} state ${state}, waiting in ${wchan || '-'}`
  } catch {
    return `process ${pid} not found`
  }
}

export interface CliResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs the compiled CLI (or another copy of it: `cli`) to its end with `args`. A non-zero exit is a
 * result to assert on, not an error.
 */
export function runCli(
  args: string[],
  { cli = CLI, ...options }: ExecFileOptions & { cli?: string } = {},
): Promise<CliResult> {
  return promisify(execFile)(process.execPath, [cli, ...args], { ...options, encoding: 'utf8' }).then(
    (r): CliResult => ({ code: 0, stdout: r.stdout, stderr: r.stderr }),
    (e: CliResult): CliResult => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }),
  )
}

/** Whether `pid` still runs: a zombie does not (PID 1 here does not reap orphans). Linux's /proc. */
export function stillRuns(pid: number): boolean {
  try {
    const state = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '')[0]
    return state !== 'Z' && state !== 'X'
  } catch {
    return false
  }
}

/**
 * Waits until `pid` no longer runs. One that still runs after `withinMs` gets SIGKILL (a test must not
 * leave it behind), and the wait fails saying `why` it should have stopped.
 */
export async function waitUntilDead(pid: number, withinMs: number, why: string): Promise<void> {
  try {
    await waitUntil(() => !stillRuns(pid), `process ${pid} to stop (${why})`, { withinMs, everyMs: 50 })
  } catch (error) {
    if (stillRuns(pid)) process.kill(pid, 'SIGKILL')
    throw error
  }
}
