/**
 * A real PostgreSQL 15 server for the tests: initdb and postgres run as the `postgres` user (both refuse
 * root) in a temp folder chown'd to it, on a free loopback port, as a child of the test process (never
 * daemonised: pg_ctl would leave zombies here). fsync is off (the OS keeps what a killed server wrote:
 * fences survive a crash, not a power cut). A start is retried on fresh ports with the log tail in every
 * error; a restart keeps the data and the port. Stopped by SIGINT (fast shutdown).
 */
import { execFile } from 'node:child_process'
import { chmodSync, chownSync, copyFileSync, existsSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import postgres from 'postgres'
import { type TempDir, tempDir } from '../support/temp.js'
import { onFreshPorts, type PickPorts } from './ports.js'
import { againOnPort, FolderServer, ServerProcess } from './process.js'

const BIN = '/usr/lib/postgresql/15/bin'
const INSTALL = 'apt-get install postgresql-15'

export interface PostgresServer {
  readonly port: number
  /** `postgres://postgres@127.0.0.1:<port>/postgres` plus `query`. */
  url(query?: string): string
  readonly dir: string
  readonly pid: number
  /** Sends a signal (SIGKILL for a crash, SIGSTOP/SIGCONT for a pause). */
  signal(signal: NodeJS.Signals): void
  /** Starts it again on its port with its data (after a crash, or stopped first when running). */
  restart(): Promise<void>
  stop(): Promise<void>
  destroy(): Promise<void>
  log(): string
}

export interface PostgresOptions {
  readonly pickPorts?: PickPorts
  /** Server settings (`-c name=value`), e.g. a non-default `default_transaction_isolation`. */
  readonly settings?: Readonly<Record<string, string>>
  /** TLS on (`ssl=on`) with this certificate and key (copied into the server's folder, owned by it). */
  readonly tls?: { readonly certFile: string; readonly keyFile: string }
}

/** The `postgres` user's ids: the server refuses to run as root. */
async function postgresUser(): Promise<{ uid: number; gid: number }> {
  const run = promisify(execFile)
  const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])])
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) }
}

function requireServer(): void {
  if (!existsSync(join(BIN, 'postgres'))) {
    throw new Error(
      `PostgreSQL 15 is not installed (${BIN}/postgres). Run "npm run test:all", which installs it (${INSTALL}).`,
    )
  }
}

/** `ssl=on` with copies of the certificate and key the server may read (it refuses a key others can). */
function tlsSettings(
  dir: string,
  as: { uid: number; gid: number },
  tls: NonNullable<PostgresOptions['tls']>,
): Record<string, string> {
  const cert = join(dir, 'server.pem')
  const key = join(dir, 'server.key')
  copyFileSync(tls.certFile, cert)
  copyFileSync(tls.keyFile, key)
  for (const file of [cert, key]) chownSync(file, as.uid, as.gid)
  chmodSync(key, 0o600)
  return { ssl: 'on', ssl_cert_file: cert, ssl_key_file: key }
}

/** Whether OUR server answers on `port`: its data directory is the one we made. */
async function answers(port: number, data: string): Promise<boolean> {
  const sql = postgres({
    host: '127.0.0.1',
    port,
    username: 'postgres',
    database: 'postgres',
    max: 1,
    connect_timeout: 1,
    onnotice: () => {},
    // Ended unanswered after 2 s below: an array-type read in flight then (postgres.js starts one on each
    // new connection, in a promise nobody awaits) would become an unhandled rejection.
    fetch_types: false,
  })
  // Bounded: postgres.js can wait on a socket that a squatter on the port accepted and dropped.
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), 2000)
  })
  const asked = sql
    .unsafe("SELECT current_setting('data_directory') AS d")
    .then((rows) => rows[0]?.d === data)
    .catch(() => false)
  try {
    return await Promise.race([asked, late])
  } finally {
    clearTimeout(timer)
    void sql.end({ timeout: 0 }).catch(() => {})
  }
}

async function launch(
  port: number,
  data: string,
  dir: string,
  as: { uid: number; gid: number },
  settings: Readonly<Record<string, string>>,
) {
  const proc = new ServerProcess(
    `postgres on port ${port}`,
    join(BIN, 'postgres'),
    [
      ...['-D', data, '-p', String(port), '-k', dir],
      ...['-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'full_page_writes=off'],
      ...['-c', 'max_connections=200', '-c', 'log_min_messages=warning'],
      ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    ],
    dir,
    { as, stopSignal: 'SIGINT' },
  )
  try {
    await proc.untilReady(() => answers(port, data), 20_000)
    return proc
  } catch (error) {
    await proc.stop()
    throw error
  }
}

class RunningPostgres extends FolderServer implements PostgresServer {
  constructor(
    readonly port: number,
    folder: TempDir,
    readonly data: string,
    readonly as: { uid: number; gid: number },
    readonly settings: Readonly<Record<string, string>>,
    proc: ServerProcess,
  ) {
    super(folder)
    this.proc = proc
  }

  url(query = ''): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres${query}`
  }

  async restart(): Promise<void> {
    await this.proc.stop()
    this.proc = await againOnPort(`postgres on port ${this.port}`, () =>
      launch(this.port, this.data, this.dir, this.as, this.settings),
    )
  }
}

/** Starts PostgreSQL 15 on a free loopback port in a fresh cluster of its own. */
export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresServer> {
  requireServer()
  const as = await postgresUser()
  return onFreshPorts(
    'postgres',
    1,
    async ([port]) => {
      const folder = tempDir('postgres')
      try {
        chownSync(folder.path, as.uid, as.gid)
        const data = join(folder.path, 'data')
        await promisify(execFile)(
          join(BIN, 'initdb'),
          [
            ...['-D', data, '--auth=trust', '--username=postgres', '--encoding=UTF8'],
            ...['--locale=C.UTF-8', '--no-sync', '--no-instructions'],
          ],
          { ...as, cwd: folder.path },
        )
        const settings = {
          ...options.settings,
          ...(options.tls && tlsSettings(folder.path, as, options.tls)),
        }
        const proc = await launch(port!, data, folder.path, as, settings)
        return new RunningPostgres(port!, folder, data, as, settings, proc)
      } catch (error) {
        folder.cleanup()
        throw error
      }
    },
    options.pickPorts,
  )
}
