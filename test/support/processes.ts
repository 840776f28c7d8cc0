import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

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
            return reject(new Error(`no "${event}" within ${timeoutMs} ms: ${stderr}`))
          waiters.push(check)
          setTimeout(check, 200).unref()
        }
        check()
      })
    },
  }
}
