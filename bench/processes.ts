/**
 * The CLI beside flock(1), as whole processes on one host (the file backend): how soon the next job runs
 * after the holder is killed with SIGKILL (scenario k), and what `fencelock run` costs per run in start-up
 * time and memory (scenario r). util-linux `flock` must be on the PATH. Times are from this process's
 * monotonic clock: the kill, and the first byte the next job writes to its pipe.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Adapter, Env } from './adapter.js'
import type { Figures, Scenario } from './scenarios.js'
import { percentile } from './stats.js'

const CLI = fileURLToPath(new URL('../src/cli/main.js', import.meta.url))
const n = (name: string, fallback: number) => Number(process.env[name] ?? fallback)
const onFile = (a: Adapter) => a.name === 'fencelock file'

/** Resolves when `stream` has carried `text` (at that moment, on this process's clock). */
function seen(stream: NodeJS.ReadableStream, text: string): Promise<number> {
  let all = ''
  return new Promise((resolve) => {
    stream.on('data', (chunk: Buffer) => {
      all += chunk.toString()
      if (all.includes(text)) resolve(performance.now())
    })
  })
}

const exited = (child: ChildProcess) =>
  new Promise<void>((resolve) =>
    child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', () => resolve()),
  )

/** Starts a process as the leader of a group of its own, its stdout and stderr piped to us. */
const job = (file: string, args: string[]) =>
  spawn(file, args, { detached: true, stdio: ['pipe', 'pipe', 'pipe'] })

/** A process group that may outlive a round (a failed one): killed at the end. */
function killGroup(child: ChildProcess): void {
  try {
    process.kill(-child.pid!, 'SIGKILL')
  } catch {}
}

/**
 * One round: the holder holds the lock (its stdout said `held`), the next job waits (`waiting` said so),
 * the holder's group gets SIGKILL; returns the ms from the kill to the next job's first output.
 */
async function killRound(
  holder: ChildProcess,
  held: string,
  startWaiter: () => ChildProcess,
  waiting: (waiter: ChildProcess) => Promise<unknown>,
): Promise<number> {
  let waiter: ChildProcess | undefined
  try {
    await seen(holder.stdout!, held)
    waiter = startWaiter()
    const granted = seen(waiter.stdout!, 'granted')
    await waiting(waiter)
    const killedAt = performance.now()
    process.kill(-holder.pid!, 'SIGKILL')
    return (await granted) - killedAt
  } finally {
    killGroup(holder)
    if (waiter) await exited(waiter)
  }
}

const fencelockArgs = (url: string) => ['--url', url, '--ttl', '60s']
/** `fencelock run` waits silently off a terminal; --verbose says when its wait begins. */
const fencelockWaiter = (url: string, key: string) => () =>
  job(process.execPath, [CLI, 'run', key, ...fencelockArgs(url), '--verbose', '--', 'echo', 'granted'])
const fencelockWaiting = (waiter: ChildProcess) => seen(waiter.stderr!, 'waiting for')
/** flock(1) says nothing while it waits: a pause long enough for it to be blocked in flock(). */
const flockWaiting = () => new Promise((resolve) => setTimeout(resolve, 300))

export const PROCESS_SCENARIOS: Scenario[] = [
  {
    id: 'k',
    title: 'k — kill -9 the holder → the next waiting job runs: fencelock (file) beside flock(1), ttl 60 s',
    primary: { metric: 'holdP50', lowerIsBetter: true, label: 'kill → next job, hold' },
    applies: onFile,
    async run(_adapter: Adapter, env: Env): Promise<Figures> {
      const url = env.urls['fencelock file']!
      const rounds = n('BENCH_KILLS', 5)
      const hold: number[] = []
      const run: number[] = []
      const flock: number[] = []
      for (let i = 0; i < rounds; i++) {
        const key = `bench-k-${process.pid}-${i}`
        // A process that holds the lease itself (`fencelock hold`), as flock(1) holds its descriptor.
        hold.push(
          await killRound(
            job(process.execPath, [CLI, 'hold', `${key}-hold`, ...fencelockArgs(url)]),
            'acquired',
            fencelockWaiter(url, `${key}-hold`),
            fencelockWaiting,
          ),
        )
        // `fencelock run`: its watchdog stops the command's group, then the lease ends with the watchdog.
        run.push(
          await killRound(
            job(process.execPath, [
              CLI,
              'run',
              `${key}-run`,
              ...fencelockArgs(url),
              '--',
              'sh',
              '-c',
              'echo held; exec sleep 600',
            ]),
            'held',
            fencelockWaiter(url, `${key}-run`),
            fencelockWaiting,
          ),
        )
        const file = join(env.dir, `flock-${key}`)
        flock.push(
          await killRound(
            job('flock', [file, 'sh', '-c', 'echo held; exec sleep 600']),
            'held',
            () => job('flock', [file, 'echo', 'granted']),
            flockWaiting,
          ),
        )
      }
      const flockP50 = percentile(flock, 50)
      return {
        metrics: {
          holdP50: percentile(hold, 50),
          runP50: percentile(run, 50),
          flockP50,
          holdPerFlock: percentile(hold, 50) / flockP50,
          runPerFlock: percentile(run, 50) / flockP50,
        },
        samples: hold,
      }
    },
  },
  {
    id: 'r',
    title: 'r — `fencelock run KEY -- true` (file) beside `flock FILE true`: wall time per run, memory',
    primary: { metric: 'runWallP50', lowerIsBetter: true, label: 'wall time per run' },
    applies: onFile,
    async run(_adapter: Adapter, env: Env): Promise<Figures> {
      const url = env.urls['fencelock file']!
      const runs = n('BENCH_RUNS', 10)
      const key = `bench-r-${process.pid}`
      const file = join(env.dir, `flock-${key}`)
      const wall = async (file: string, args: string[]) => {
        const started = performance.now()
        await exited(spawn(file, args, { stdio: 'ignore' }))
        return performance.now() - started
      }
      const run: number[] = []
      const flock: number[] = []
      for (let i = 0; i < runs; i++) {
        run.push(await wall(process.execPath, [CLI, 'run', key, '--url', url, '--', 'true']))
        flock.push(await wall('flock', [file, 'true']))
      }
      // Memory: each process's peak resident set while the command runs.
      const command = ['sh', '-c', 'echo running; exec sleep 1']
      const cli = spawn(process.execPath, [CLI, 'run', key, '--url', url, '--', ...command], {
        stdio: ['ignore', 'pipe', 'ignore'],
      })
      await seen(cli.stdout!, 'running')
      const cliKiB = peakKiB(cli.pid!)
      const watchdog = childrenOf(cli.pid!).find((pid) =>
        readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('read -r line'),
      )
      const watchdogKiB = watchdog === undefined ? Number.NaN : peakKiB(watchdog)
      await exited(cli)
      const holder = spawn('flock', [file, ...command], { stdio: ['ignore', 'pipe', 'ignore'] })
      await seen(holder.stdout!, 'running')
      const flockKiB = peakKiB(holder.pid!)
      await exited(holder)
      const runWallP50 = percentile(run, 50)
      const flockWallP50 = percentile(flock, 50)
      return {
        metrics: {
          runWallP50,
          flockWallP50,
          runPerFlock: runWallP50 / flockWallP50,
          cliPeakMiB: cliKiB / 1024,
          watchdogPeakMiB: watchdogKiB / 1024,
          flockPeakMiB: flockKiB / 1024,
        },
        samples: run,
      }
    },
  },
]

/** A process's peak resident set so far (VmHWM), in KiB. */
function peakKiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN)
}

/** The child processes of `pid` (Linux /proc). */
function childrenOf(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).flatMap((task) =>
    readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number),
  )
}
