import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** A free TCP port on loopback (the OS picks it). Kept below 55535 where a +10000 bus port must fit. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = createServer()
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => {
        const address = server.address()
        server.close(() => resolve(typeof address === 'object' && address ? address.port : 0))
      })
    })
    if (port > 0 && port < 55_535) return port
  }
}

/** Fails loudly when a server binary is missing: tests never skip a backend silently. */
export function requireBinary(binary: string, install: string): string {
  try {
    return execFileSync('sh', ['-c', `command -v ${binary}`], { encoding: 'utf8' }).trim()
  } catch {
    throw new Error(`${binary} is not installed. Run "npm run test:all", which installs it (${install}).`)
  }
}

export function makeTempDir(label: string): string {
  return mkdtempSync(join(tmpdir(), `fencelock-${label}-`))
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true })
}

/** Starts a server process, keeping its output for error messages. Never detached: it dies with us. */
export function startProcess(
  binary: string,
  args: string[],
  cwd: string,
): { child: ChildProcess; output: () => string } {
  const child = spawn(binary, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4000)
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  return { child, output: () => output }
}

/** Stops a process we started, by its PID: SIGTERM, then SIGKILL after `graceMs`. */
export async function stopProcess(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
  await exited
  clearTimeout(timer)
}

/** Polls `check` until it resolves true, or throws after `timeoutMs` with `describe()` in the message. */
export async function waitUntil(
  check: () => Promise<boolean>,
  timeoutMs: number,
  describe: () => string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await check().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms: ${describe()}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}
