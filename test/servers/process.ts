/**
 * A server process started by the tests: never detached (it dies with us), its output kept for error
 * messages, stopped only by its own PID.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import type { TempDir } from '../support/temp.js'
import { sleep } from '../support/time.js'
import { waitUntil } from '../support/wait.js'
import { START_ATTEMPTS } from './ports.js'

/** Fails loudly when a server binary is missing: tests never skip a backend silently. */
export function requireBinary(binary: string, install: string): string {
  try {
    return execFileSync('sh', ['-c', `command -v ${binary}`], { encoding: 'utf8' }).trim()
  } catch {
    throw new Error(`${binary} is not installed. Run "npm run test:all", which installs it (${install}).`)
  }
}

/** How much of a server's output is kept (its last characters). */
const KEPT = 4000

/** The end of a log, set off for an error message. */
export const logTail = (log: string): string =>
  log.trim() === ''
    ? ' (the server printed nothing)'
    : `\n--- server log (tail) ---\n${log.slice(-2000).trimEnd()}\n---`

export class ServerProcess {
  readonly child: ChildProcess
  #output = ''
  readonly #exit = new AbortController()

  readonly #stopSignal: NodeJS.Signals

  /** Starts `binary` with `args` in `cwd` (as another user with `as`; stopped by `stopSignal`, default SIGTERM). */
  constructor(
    readonly name: string,
    binary: string,
    args: string[],
    cwd: string,
    options: { readonly as?: { uid: number; gid: number }; readonly stopSignal?: NodeJS.Signals } = {},
  ) {
    this.#stopSignal = options.stopSignal ?? 'SIGTERM'
    this.child = spawn(binary, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'], ...(options.as ?? {}) })
    const keep = (chunk: Buffer) => {
      this.#output = (this.#output + chunk.toString()).slice(-KEPT)
    }
    this.child.stdout?.on('data', keep)
    this.child.stderr?.on('data', keep)
    this.child.once('exit', (code, signal) => {
      // The error quotes the output, which may still sit in the pipes: wait for them to close, but not
      // for long (a child the server forked, e.g. a Redis save, can hold them open after it died).
      const report = () => {
        clearTimeout(timer)
        this.#exit.abort(new Error(`${name} exited (${signal ?? `code ${code}`})${logTail(this.#output)}`))
      }
      const timer = setTimeout(report, 200)
      this.child.once('close', report)
    })
    this.child.once('error', (error) =>
      this.#exit.abort(new Error(`${name} could not be started: ${error.message}`)),
    )
  }

  get pid(): number {
    return this.child.pid ?? -1
  }

  /** The tail of its output (its log). */
  log(): string {
    return this.#output
  }

  /**
   * Waits until `ready()` holds while the process runs. Fails at once when it exits (a port taken in
   * between, a bad flag) and after `withinMs` otherwise; both errors carry the log tail.
   */
  async untilReady(ready: () => Promise<boolean>, withinMs: number): Promise<void> {
    // No PID: the spawn failed, and its 'error' event (which ends the wait) is on its way.
    const started = async () => this.child.pid !== undefined && (await ready())
    await waitUntil(started, () => `${this.name} to become ready${logTail(this.#output)}`, {
      withinMs,
      everyMs: 50,
      signal: this.#exit.signal,
    })
    // A check can pass against another process on our port just before ours gives up binding it.
    this.#exit.signal.throwIfAborted()
  }

  /** Stops it: its stop signal, then SIGKILL after `graceMs` (a paused process ignores SIGTERM until resumed). */
  async stop(graceMs = 5000): Promise<void> {
    if (this.#exit.signal.aborted) return
    const exited = new Promise((resolve) => this.#exit.signal.addEventListener('abort', resolve))
    this.child.kill(this.#stopSignal)
    const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs)
    await exited
    clearTimeout(timer)
  }
}

/**
 * Starts a server again on its old port(s): its clients know them and reconnect there, so no other will do.
 * A port taken in passing (e.g. the source port of a connection refused while the server was down) is
 * free again soon: up to START_ATTEMPTS tries, a moment apart; the error says which port it wanted.
 */
export async function againOnPort<T>(what: string, launch: () => Promise<T>): Promise<T> {
  const failures: string[] = []
  while (failures.length < START_ATTEMPTS) {
    try {
      return await launch()
    } catch (error) {
      failures.push(`attempt ${failures.length + 1}: ${(error as Error).message}`)
      await sleep(250)
    }
  }
  throw new Error(`${what} could not start again on its old port(s):\n${failures.join('\n')}`)
}

/** A server started in a temp folder of its own: what every kind shares (each kind adds its restart). */
export class FolderServer {
  /** The running process; a restart replaces it. Set by the kind's constructor. */
  protected proc!: ServerProcess
  readonly #folder: TempDir

  constructor(folder: TempDir) {
    this.#folder = folder
  }

  get dir(): string {
    return this.#folder.path
  }

  get pid(): number {
    return this.proc.pid
  }

  /** Sends a signal (SIGKILL for a crash, SIGSTOP/SIGCONT for a pause). */
  signal(signal: NodeJS.Signals): void {
    this.proc.child.kill(signal)
  }

  stop(): Promise<void> {
    return this.proc.stop()
  }

  /** The tail of its output (its log), for a failing test to keep. */
  log(): string {
    return this.proc.log()
  }

  /** Stops it and removes its folder. */
  async destroy(): Promise<void> {
    await this.proc.stop()
    this.#folder.cleanup()
  }
}
