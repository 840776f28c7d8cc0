/**
 * A real MariaDB server (Debian's `mariadb-server`, 10.11) for the tests: `mariadb-install-db` makes a data
 * folder in a temp folder of its own, then `mariadbd` runs on a free loopback port as a child process (as
 * root with `--user=root`; `--no-defaults` first, or it reads /etc/mysql/my.cnf). A start is retried on
 * fresh ports (see ports.ts), every error carries the server's log tail (its error log goes to stderr,
 * which ServerProcess keeps), and it is stopped by PID with SIGTERM. A restart keeps the data folder.
 */
import { execFile } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { createConnection } from 'mysql2/promise'
import { type TempDir, tempDir } from '../support/temp.js'
import { onFreshPorts, type PickPorts } from './ports.js'
import { againOnPort, FolderServer, logTail, requireBinary, ServerProcess } from './process.js'

const INSTALL = 'apt-get install mariadb-server'

/** The database the tests use (made at start). */
export const MARIADB_DATABASE = 'fencelock'

export interface MariaDbServer {
  readonly port: number
  /** `mysql://root@127.0.0.1:<port>/fencelock` (root has no password, over TCP from loopback only). */
  readonly url: string
  readonly dir: string
  readonly pid: number
  /** Stops the server (SIGTERM, then SIGKILL). */
  stop(): Promise<void>
  /** Sends a signal (SIGSTOP/SIGCONT for a pause, SIGKILL for a crash). */
  signal(signal: NodeJS.Signals): void
  /** Starts it again on the same port and data folder: what was committed survives. */
  restart(): Promise<void>
  /** Stops it and removes its folder. */
  destroy(): Promise<void>
  /** The tail of its output (its error log). */
  log(): string
}

export interface MariaDbServerOptions {
  /** Extra `mariadbd` arguments, e.g. ['--log-bin', '--binlog-format=STATEMENT']. */
  readonly args?: string[]
  /** Where fresh ports come from. @default freePorts (the OS's) */
  readonly pickPorts?: PickPorts
}

/**
 * Whether the server on `port` is ours and up: it reports our data folder (so a squatter on the port, or
 * another test's server, never passes for ours), and the tests' database exists.
 */
async function answers(port: number, dataDir: string): Promise<boolean> {
  const connection = await createConnection({ host: '127.0.0.1', port, user: 'root', connectTimeout: 1000 })
  try {
    const [rows] = await connection.query('SELECT @@datadir AS dir')
    const dir = String((rows as { dir: string }[])[0]?.dir ?? '').replace(/\/$/, '')
    if (dir !== dataDir) return false
    await connection.query(`CREATE DATABASE IF NOT EXISTS ${MARIADB_DATABASE}`)
    return true
  } finally {
    connection.destroy()
  }
}

/** The data folder's files (system tables), made once per server by mariadb-install-db (~0.6 s). */
async function installDb(dir: string): Promise<void> {
  const install = requireBinary('mariadb-install-db', INSTALL)
  mkdirSync(join(dir, 'tmp'), { recursive: true })
  try {
    await promisify(execFile)(install, [
      '--no-defaults',
      `--datadir=${join(dir, 'data')}`,
      // Its own temp folder (passed on to the bootstrap server): in the shared /tmp, another process's
      // clean-up removed a temp table of a concurrent bootstrap, which then failed ("Error on delete of
      // '/tmp/#sql-temptable-…'").
      `--tmpdir=${join(dir, 'tmp')}`,
      '--user=root',
      '--auth-root-authentication-method=normal',
      '--skip-test-db',
      '--skip-name-resolve',
    ])
  } catch (error) {
    const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string }
    throw new Error(`mariadb-install-db failed: ${(error as Error).message}${logTail(`${stdout}${stderr}`)}`)
  }
}

/** Runs mariadbd and waits until it answers; stops it and throws (with its log) if it never does. */
async function launch(binary: string, port: number, dir: string, extra: string[]): Promise<ServerProcess> {
  const dataDir = join(dir, 'data')
  const args = [
    '--no-defaults', // must come first: otherwise /etc/mysql/my.cnf is read
    `--datadir=${dataDir}`,
    `--socket=${join(dir, 'mysqld.sock')}`,
    `--pid-file=${join(dir, 'mysqld.pid')}`,
    `--port=${port}`,
    `--tmpdir=${join(dir, 'tmp')}`,
    '--bind-address=127.0.0.1',
    '--user=root',
    '--skip-name-resolve',
    '--skip-log-bin',
    '--innodb-buffer-pool-size=64M',
    // Each commit reaches the OS (a SIGKILL of the server loses none), fsynced once a second.
    '--innodb-flush-log-at-trx-commit=2',
    ...extra,
  ]
  const proc = new ServerProcess(`mariadbd on port ${port}`, binary, args, dir)
  try {
    await proc.untilReady(() => answers(port, dataDir), 20_000)
    return proc
  } catch (error) {
    await proc.stop()
    throw error
  }
}

class RunningMariaDb extends FolderServer implements MariaDbServer {
  readonly url: string

  constructor(
    readonly port: number,
    folder: TempDir,
    readonly binary: string,
    readonly extra: string[],
    proc: ServerProcess,
  ) {
    super(folder)
    this.url = `mysql://root@127.0.0.1:${port}/${MARIADB_DATABASE}`
    this.proc = proc
  }

  async restart(): Promise<void> {
    await this.proc.stop()
    this.proc = await againOnPort(`mariadbd on port ${this.port}`, () =>
      launch(this.binary, this.port, this.dir, this.extra),
    )
  }
}

/** Starts a real MariaDB server on a free loopback port in its own temp folder, with a `fencelock` database. */
export async function startMariaDb(options: MariaDbServerOptions = {}): Promise<MariaDbServer> {
  const binary = requireBinary('mariadbd', INSTALL)
  const folder = tempDir('mariadb')
  try {
    await installDb(folder.path)
    const extra = options.args ?? []
    // The data folder is made once; only the port changes between attempts.
    return await onFreshPorts(
      'mariadbd',
      1,
      async ([port]) =>
        new RunningMariaDb(port!, folder, binary, extra, await launch(binary, port!, folder.path, extra)),
      options.pickPorts,
    )
  } catch (error) {
    folder.cleanup()
    throw error
  }
}
