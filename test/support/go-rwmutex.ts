/**
 * etcd's own Go read-write lock (`recipe.RWMutex`) in a child process, for the etcd read-write lock interop
 * test: the fixture test/fixtures/go-rwmutex/rwmutex.go is built with Debian's Go and etcd 3.4 sources
 * (GOPATH mode: no module download), once per change of the fixture, the compiler or the recipe, into
 * `.cache/go-rwmutex/<hash>/`; later runs reuse the binary. Each `startGoRwMutex` runs one process holding
 * one session and taking one lock (see the fixture's header). Stopped by its own PID, never by name.
 */
import { type ChildProcessWithoutNullStreams, execFile, execFileSync, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { requireBinary } from '../servers/process.js'

const INSTALL = 'apt-get install -y golang-go golang-etcd-server-dev'
const SOURCE = fileURLToPath(new URL('../../../test/fixtures/go-rwmutex/rwmutex.go', import.meta.url))
const CACHE = fileURLToPath(new URL('../../../.cache/', import.meta.url))
/** Where golang-etcd-server-dev puts etcd 3.4's sources and, beside them, their Go dependencies. */
const GOPATH = '/usr/share/gocode'
/** The recipe itself: the build hashes it, so a new etcd package rebuilds the fixture. */
const RECIPE = `${GOPATH}/src/go.etcd.io/etcd/contrib/recipes/rwmutex.go`

/**
 * The fixture's binary: built when no binary of this source, Go and recipe is cached. Fails loudly (with
 * the install line) when Go or etcd's sources are missing.
 */
export async function buildGoRwMutex(): Promise<string> {
  const go = requireBinary('go', INSTALL)
  if (!existsSync(RECIPE)) {
    throw new Error(`${RECIPE} not installed. Run "npm run test:all", which installs it (${INSTALL}).`)
  }
  const version = execFileSync(go, ['version'], { encoding: 'utf8' })
  const hash = createHash('sha256')
    .update(readFileSync(SOURCE))
    .update(version)
    .update(readFileSync(RECIPE))
    .digest('hex')
    .slice(0, 16)
  const folder = `${CACHE}go-rwmutex/${hash}`
  const binary = `${folder}/rwmutex`
  if (existsSync(binary)) return binary
  mkdirSync(folder, { recursive: true })
  // Built beside and renamed: two test runs building at once never run a half-written binary.
  const building = `${binary}.${process.pid}`
  await promisify(execFile)(go, ['build', '-o', building, SOURCE], {
    env: {
      ...process.env,
      GO111MODULE: 'off',
      GOPATH,
      GOFLAGS: '',
      GOCACHE: `${CACHE}go-build`,
    },
    maxBuffer: 1 << 24,
  })
  renameSync(building, binary)
  return binary
}

/** One Go process with one session, taking one read or write lock. */
export interface GoRwMutex {
  readonly pid: number
  /** Resolves with its key and the key's create revision once the key is on the store. */
  readonly queued: Promise<{ key: string; revision: bigint }>
  /**
   * Resolves with the key the recipe watched the `nth` time (1: first; it waits for that key's deletion,
   * and reads the line again when woken), or undefined when `RLock` or `Lock` returned before.
   */
  waitedFor(nth?: number): Promise<string | undefined>
  /** Resolves once `RLock` or `Lock` returned. */
  readonly acquired: Promise<void>
  /** Whether `acquired` has resolved. */
  holds(): boolean
  /** `RUnlock` or `Unlock`, then the session closed and the process gone. */
  release(): Promise<void>
  /** What it printed, for a failing test's message. */
  log(): string
  /** Kills it by PID (its lease then ends by its ttl, 10 s) unless it is gone. */
  stop(): Promise<void>
}

/** Starts `binary` taking a `mode` lock of Go's prefix `prefix` on `endpoints`; resolves once its session is open. */
export async function startGoRwMutex(
  binary: string,
  endpoints: string,
  mode: 'read' | 'write',
  prefix: string,
): Promise<GoRwMutex> {
  const child: ChildProcessWithoutNullStreams = spawn(binary, [endpoints, mode, prefix], { stdio: 'pipe' })
  let transcript = ''
  let gone: Error | undefined
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const printed: string[] = []
  /** Takers of the line their `find` picks from the lines so far; failed once the process is gone. */
  type Find = (lines: readonly string[]) => string | undefined
  const takers: Array<{ find: Find; take(line: string): void; fail(e: Error): void }> = []
  const deliver = () => {
    for (let i = 0; i < takers.length; i++) {
      const taker = takers[i]!
      const found = taker.find(printed)
      if (found !== undefined) {
        takers.splice(i--, 1)
        taker.take(found)
      } else if (gone) {
        takers.splice(i--, 1)
        taker.fail(gone)
      }
    }
  }
  /** The line `find` picks (from the lines so far or to come); handled at once, awaited later. */
  const lineWhere = (find: Find) => {
    const line = new Promise<string>((take, fail) => {
      takers.push({ find, take, fail })
      deliver()
    })
    line.catch(() => {})
    return line
  }
  const first = (word: string) =>
    lineWhere((lines) => lines.find((l) => l.startsWith(`${word} `) || l === word))
  child.stderr.on('data', (chunk) => {
    transcript += chunk
  })
  createInterface({ input: child.stdout }).on('line', (line) => {
    transcript += `${line}\n`
    printed.push(line)
    deliver()
  })
  // On close, not exit: every line it printed has been read by then.
  child.once('close', (code, signal) => {
    gone = new Error(
      `the Go RWMutex process exited (${signal ?? `code ${code}`}):\n${transcript.slice(-2000)}`,
    )
    deliver()
  })
  child.once('error', (error) => {
    gone = error
    deliver()
  })
  let held = false
  const acquired = first('acquired').then(() => {
    held = true
  })
  acquired.catch(() => {})
  const queued = first('queued').then((line) => {
    const [, key, revision] = line.split(' ')
    return { key: key!, revision: BigInt(revision!) }
  })
  queued.catch(() => {})
  /** The `nth` "waits" line, or the "acquired" line when it comes first. */
  const waitedFor = (nth = 1) =>
    lineWhere((lines) => {
      let seen = 0
      return lines.find((l) => l.startsWith('acquired ') || (l.startsWith('waits ') && ++seen === nth))
    }).then((line) => (line.startsWith('waits ') ? line.slice('waits '.length) : undefined))
  await first('ready').catch(async (error: Error) => {
    child.kill('SIGKILL')
    await exited
    throw error
  })
  return {
    pid: child.pid ?? -1,
    queued,
    waitedFor,
    acquired,
    holds: () => held,
    async release() {
      child.stdin.write('release\n')
      await first('released')
      await exited
    },
    log: () => transcript,
    async stop() {
      if (gone) return
      child.kill('SIGKILL')
      await exited
    },
  }
}
