/**
 * Processes the tests start: the compiled CLI (run to its end, or `hold` kept running), a script of
 * the tests run to its end, and a wait for a process to be gone.
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
  /** The JSON lines the child printed, in order (a line that is not JSON is kept as `{ line }`). */
  readonly events: Array<Record<string, unknown>>
  /** Resolves with the next event of this name. */
  next(event: string, timeoutMs?: number): Promise<Record<string, unknown>>
  /** Resolves with the exit code (or 128 + signal). */
  readonly exited: Promise<number>
  send(line: string): void
}

/**
 * Starts `fencelock hold <key>` in its own process. Nothing it does throws in the test's event handlers
 * (there an error would only fail the whole test file, after its tests): a line that is not JSON, a
 * failed spawn, a line sent after it exited all show up in `next`'s error instead.
 */
export function startHold(url: string, key: string, args: string[] = []): HoldProcess {
  const child = spawn(process.execPath, [CLI, 'hold', key, '--url', url, ...args], { stdio: 'pipe' })
  const events: Array<Record<string, unknown>> = []
  const waiters: Array<() => void> = []
  const wakeAll = () => {
    for (const wake of waiters.splice(0)) wake()
  }
  let stderr = ''
  let failed: Error | undefined
  child.on('error', (error) => {
    failed = error
    wakeAll()
  })
  // EPIPE for a line sent to a process that has exited: the line is lost, and `next` says it exited.
  child.stdin.on('error', () => {})
  child.stderr.on('data', (chunk) => {
    stderr += chunk
  })
  // Every line it printed has been read once its output has ended: 'exit' can come before the last lines.
  let outputEnded = false
  createInterface({ input: child.stdout })
    .on('line', (line) => {
      events.push(parseEvent(line))
      wakeAll()
    })
    .on('close', () => {
      outputEnded = true
      wakeAll()
    })
  const exited = new Promise<number>((resolve) => {
    child.on('exit', (code, signal) => {
      resolve(code ?? (signal === 'SIGKILL' ? 137 : 128))
      wakeAll()
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
          if (failed) return reject(new Error(`fencelock hold could not start: ${failed.message}`))
          if (outputEnded && (child.exitCode !== null || child.signalCode !== null)) {
            return reject(
              new Error(
                `fencelock hold exited (${child.exitCode ?? child.signalCode}) before "${event}" ` +
                  `(printed ${JSON.stringify(events)}): ${stderr}`,
              ),
            )
          }
          if (Date.now() - started > timeoutMs)
            return reject(
              new Error(
                `no "${event}" within ${timeoutMs} ms (${processState(child.pid)}; printed ` +
                  `${JSON.stringify(events)}): ${stderr}`,
              ),
            )
          waiters.push(check)
          setTimeout(check, 200).unref()
        }
        check()
      })
    },
  }
}

/** One line the hold printed: its JSON, or `{ line }` when it is not JSON (the test's error shows it). */
function parseEvent(line: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(line)
    if (typeof value === 'object' && value !== null) return value as Record<string, unknown>
  } catch {}
  return { line }
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

/** Runs the compiled script `script` with `args` on this node, its output on the test's; its exit code. */
export function runScript(script: string, args: string[]): Promise<number | null> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'inherit', 'inherit'] })
    child.on('exit', (code) => resolve(code))
  })
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
