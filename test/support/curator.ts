/**
 * Apache Curator's `InterProcessMutex` in a Java child process, for the ZooKeeper interop tests: the
 * fixture `test/fixtures/curator/CuratorLock.java` is compiled with `javac` once per test file (into a temp
 * folder) against Debian's Curator 5.4 and ZooKeeper 3.8 jars, then each `startCurator` runs one JVM that
 * answers line commands (see the fixture's header). Stopped by its own PID, never by name.
 */
import { type ChildProcessWithoutNullStreams, execFileSync, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { requireBinary } from '../servers/process.js'
import { type TempDir, tempDir } from './temp.js'

const INSTALL =
  'apt-get install -y openjdk-17-jdk-headless libcurator-recipes-java libcurator-framework-java libcurator-client-java libzookeeper-java'
const SOURCE = fileURLToPath(new URL('../../../test/fixtures/curator/CuratorLock.java', import.meta.url))
/**
 * What the fixture needs at compile and run time: Curator's three jars, the ZooKeeper client and its wire
 * format (jute), Guava (Curator's collections), slf4j with the no-op binding (quiet). The ZooKeeper client
 * talks NIO by default: no Netty.
 */
const JARS = [
  'curator-recipes',
  'curator-framework',
  'curator-client',
  'zookeeper',
  'zookeeper-jute',
  'guava',
  'slf4j-api',
  'slf4j-nop',
].map((name) => `/usr/share/java/${name}.jar`)

/** The LeaderLatch fixture (the election interop test drives it itself). */
export const LATCH_SOURCE = fileURLToPath(
  new URL('../../../test/fixtures/curator/CuratorLatch.java', import.meta.url),
)

/** The InterProcessSemaphoreV2 fixture (the semaphore interop test drives it itself). */
export const SEMAPHORE_SOURCE = fileURLToPath(
  new URL('../../../test/fixtures/curator/CuratorSemaphore.java', import.meta.url),
)

/** The InterProcessReadWriteLock fixture (the read-write lock interop test drives it itself). */
export const RWLOCK_SOURCE = fileURLToPath(
  new URL('../../../test/fixtures/curator/CuratorRwLock.java', import.meta.url),
)

/** The compiled fixture: its class folder. One per test file; `cleanup()` removes it. */
export interface CuratorBuild {
  readonly classPath: string
  cleanup(): void
}

/**
 * Compiles the fixture (or another Java file of test/fixtures/curator, named by `source`) with `javac`;
 * fails loudly (with the install line) when the JDK or a jar is missing.
 */
export function compileCurator(source = SOURCE): CuratorBuild {
  const javac = requireBinary('javac', INSTALL)
  const missing = JARS.filter((jar) => !existsSync(jar))
  if (missing.length > 0) {
    throw new Error(
      `${missing.join(', ')} not installed. Run "npm run test:all", which installs them (${INSTALL}).`,
    )
  }
  const out: TempDir = tempDir('curator')
  const classPath = JARS.join(':')
  execFileSync(javac, ['-d', out.path, '-cp', classPath, source], { stdio: 'pipe' })
  return { classPath: `${out.path}:${classPath}`, cleanup: out.cleanup }
}

/** One JVM holding one Curator client (one ZooKeeper session). */
export interface CuratorProcess {
  readonly pid: number
  /** The session id (hex) the client had when it connected. */
  readonly sessionId: string
  /**
   * Starts `InterProcessMutex.acquire(timeoutMs)` on `path`; resolves with the lock node's full path, or
   * `undefined` when Curator timed out. Curator's lock waits on its own thread: other commands answer meanwhile.
   */
  acquire(path: string, timeoutMs: number): Promise<string | undefined>
  release(): Promise<void>
  /** The lock nodes of `path` in Curator's own order (`getParticipantNodes`), as node names. */
  participants(path: string): Promise<string[]>
  /** Whether Curator takes `name` for one of its protected nodes (`ProtectedUtils.isProtectedZNode`). */
  isProtected(name: string): Promise<boolean>
  /** Ends the client's session from outside (a second handle with its id and password closes it). */
  expire(): Promise<void>
  /** The lines it printed (and its stderr), for a failing test's message. */
  log(): string
  /** Asks it to quit; kills it by PID when it does not exit within a few seconds. */
  stop(): Promise<void>
}

/** The command line of a JVM running class `main` of `build` (the way `startCurator` starts its own). */
export function javaCommand(build: CuratorBuild, main: string, args: string[]): [string, string[]] {
  return [
    requireBinary('java', INSTALL),
    ['-Xmx128m', '-XX:TieredStopAtLevel=1', '-cp', build.classPath, main, ...args],
  ]
}

/** Starts one Curator client on `connectString` with this session timeout; resolves once it is connected. */
export async function startCurator(
  build: CuratorBuild,
  connectString: string,
  { sessionTimeoutMs = 10_000 } = {},
): Promise<CuratorProcess> {
  const child: ChildProcessWithoutNullStreams = spawn(
    requireBinary('java', INSTALL),
    // A short-lived client: the JIT's first tier is enough and starts faster on a busy machine.
    [
      '-Xmx128m',
      '-XX:TieredStopAtLevel=1',
      '-cp',
      build.classPath,
      'CuratorLock',
      connectString,
      `${sessionTimeoutMs}`,
    ],
    { stdio: 'pipe' },
  )
  let transcript = ''
  /** Answers not yet taken, and takers waiting for the next answer starting with a given word. */
  const answers: string[] = []
  const takers: Array<{ words: string[]; take: (line: string) => void; fail: (e: Error) => void }> = []
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  let gone: Error | undefined
  const deliver = () => {
    for (let i = 0; i < takers.length; i++) {
      const taker = takers[i]!
      const at = answers.findIndex((line) => taker.words.includes(line.split(' ')[0]!))
      if (at >= 0) {
        takers.splice(i--, 1)
        taker.take(answers.splice(at, 1)[0]!)
      }
    }
    if (gone) for (const taker of takers.splice(0)) taker.fail(gone)
  }
  child.stderr.on('data', (chunk) => {
    transcript += chunk
  })
  createInterface({ input: child.stdout }).on('line', (line) => {
    transcript += `${line}\n`
    answers.push(line)
    deliver()
  })
  child.once('exit', (code, signal) => {
    gone = new Error(`the Curator process exited (${signal ?? `code ${code}`}):\n${transcript.slice(-2000)}`)
    deliver()
  })
  /** The next answer whose first word is one of `words` ("error" is always one: it fails the call). */
  const next = (words: string[]): Promise<string> =>
    new Promise<string>((take, fail) => {
      takers.push({ words: [...words, 'error'], take, fail })
      deliver()
    }).then((line) => {
      if (line.startsWith('error')) throw new Error(`Curator: ${line}\n${transcript.slice(-2000)}`)
      return line
    })
  const send = (line: string) => child.stdin.write(`${line}\n`)

  const ready = await next(['ready']).catch(async (error: Error) => {
    child.kill('SIGKILL')
    await exited
    throw error
  })
  return {
    pid: child.pid ?? -1,
    sessionId: ready.split(' ')[1]!,
    async acquire(path, timeoutMs) {
      send(`acquire ${path} ${timeoutMs}`)
      const line = await next(['acquired', 'timeout'])
      return line.startsWith('acquired') ? line.slice('acquired '.length) : undefined
    },
    async release() {
      send('release')
      await next(['released'])
    },
    async participants(path) {
      send(`participants ${path}`)
      return (await next(['participants'])).split(' ').slice(1)
    },
    async isProtected(name) {
      send(`protected ${name}`)
      return (await next(['protected'])) === 'protected true'
    },
    async expire() {
      send('expire')
      await next(['expired'])
    },
    log: () => transcript,
    async stop() {
      if (gone) return
      send('quit')
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
      await exited
      clearTimeout(timer)
    },
  }
}
