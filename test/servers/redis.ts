/**
 * Real redis-server processes for the tests: one server, independent masters for Redlock, and a Redis
 * Cluster. Each server runs on a loopback port in its own temp folder, without persistence by default; a
 * start is retried on fresh ports (see ports.ts), and every error carries the server's log tail.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Redis } from 'ioredis'
import { type TempDir, tempDir } from '../support/temp.js'
import { waitUntil } from '../support/wait.js'
import { freePorts, onFreshPorts, type PickPorts } from './ports.js'
import { againOnPort, FolderServer, logTail, requireBinary, ServerProcess } from './process.js'

const INSTALL = 'apt-get install redis-server'

export interface RedisServer {
  readonly port: number
  readonly url: string
  readonly dir: string
  readonly pid: number
  /** Stops the server (SIGTERM, then SIGKILL). */
  stop(): Promise<void>
  /** Sends a signal (e.g. SIGSTOP/SIGCONT for a pause, SIGKILL for a crash). */
  signal(signal: NodeJS.Signals): void
  /** Starts it again on the same port and folder (its data survives only with persistence on). */
  restart(): Promise<void>
  /** Stops it and removes its folder. */
  destroy(): Promise<void>
  /** The tail of its output (its log), for a failing test to keep. */
  log(): string
}

export interface RedisServerOptions {
  /** Extra `redis-server` arguments, e.g. ['--appendonly', 'yes']. */
  readonly args?: string[]
  /** A fixed port: the start is tried on it alone, never on another. */
  readonly port?: number
  /** Where fresh ports come from. @default freePorts (the OS's) */
  readonly pickPorts?: PickPorts
  /** TLS only (`--tls-port`, no plain port), with this certificate and key; `url` is then `rediss://`. */
  readonly tls?: { readonly certFile: string; readonly keyFile: string; readonly caFile: string }
}

/**
 * Whether the redis-server with PID `pid` answers on `port`: INFO names the process that answered, so a
 * squatter on the port never passes for ours. A server that asks for a password is up too.
 */
async function answers(port: number, pid: number, ca: Buffer | undefined): Promise<boolean> {
  const client = new Redis({
    port,
    ...(ca ? { tls: { ca } } : {}),
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1000,
    commandTimeout: 1000,
  })
  let seen = ''
  client.on('error', (error: Error) => {
    seen += error.message
  })
  try {
    await client.connect()
    return new RegExp(`^process_id:${pid}\\s*$`, 'm').test(await client.info('server'))
  } catch (error) {
    // ioredis reports a password request as an event, then closes: the server is up (and, being
    // protected, is not the tests' squatter; untilReady checks that ours still runs).
    return /NOAUTH|WRONGPASS/.test(`${(error as Error).message} ${seen}`)
  } finally {
    client.disconnect()
  }
}

/** Runs redis-server and waits until it answers; stops it and throws (with its log) if it never does. */
async function launch(
  binary: string,
  port: number,
  args: string[],
  dir: string,
  ca: Buffer | undefined,
): Promise<ServerProcess> {
  const proc = new ServerProcess(`redis-server on port ${port}`, binary, args, dir)
  try {
    await proc.untilReady(() => answers(port, proc.pid, ca), 10_000)
    return proc
  } catch (error) {
    await proc.stop()
    throw error
  }
}

class RunningRedis extends FolderServer implements RedisServer {
  readonly url: string
  readonly #command: { binary: string; args: string[]; ca: Buffer | undefined }

  constructor(
    readonly port: number,
    folder: TempDir,
    command: { binary: string; args: string[]; ca: Buffer | undefined },
    proc: ServerProcess,
  ) {
    super(folder)
    this.url = `${command.ca ? 'rediss' : 'redis'}://127.0.0.1:${port}`
    this.#command = command
    this.proc = proc
  }

  async restart(): Promise<void> {
    await this.proc.stop()
    const { binary, args, ca } = this.#command
    this.proc = await againOnPort(`redis-server on port ${this.port}`, () =>
      launch(binary, this.port, args, this.dir, ca),
    )
  }
}

/**
 * Starts a redis-server; `more` asks for extra ports picked with the server's own in each attempt, and
 * the arguments that name them (a cluster bus port).
 */
async function startRedisServer(
  options: RedisServerOptions,
  more = { ports: 0, args: (_ports: number[]): string[] => [] },
): Promise<RedisServer> {
  const binary = requireBinary('redis-server', INSTALL)
  const attempt = async ([port, ...extra]: number[]) => {
    const folder = tempDir('redis')
    const { tls } = options
    const ca = tls ? readFileSync(tls.caFile) : undefined
    const listen = tls
      ? ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.certFile]
      : ['--port', String(port)]
    const args = [
      ...listen,
      ...(tls
        ? ['--tls-key-file', tls.keyFile, '--tls-ca-cert-file', tls.caFile, '--tls-auth-clients', 'no']
        : []),
      ...['--bind', '127.0.0.1', '--dir', folder.path],
      ...['--save', '', '--appendonly', 'no', '--protected-mode', 'no'],
      ...(options.args ?? []),
      ...more.args(extra),
    ]
    try {
      const proc = await launch(binary, port!, args, folder.path, ca)
      return new RunningRedis(port!, folder, { binary, args, ca }, proc)
    } catch (error) {
      folder.cleanup()
      throw error
    }
  }
  if (options.port !== undefined) return attempt([options.port, ...(await freePorts(more.ports))])
  return onFreshPorts('redis-server', 1 + more.ports, attempt, options.pickPorts)
}

/** Starts a real redis-server on a free loopback port in its own temp folder, without persistence by default. */
export function startRedis(options: RedisServerOptions = {}): Promise<RedisServer> {
  return startRedisServer(options)
}

export const redisDataDir = (server: RedisServer, file: string) => join(server.dir, file)

/** Independent Redis masters for Redlock, started side by side. */
export interface RedisNodes {
  readonly servers: RedisServer[]
  /** `redlock://127.0.0.1:p1,127.0.0.1:p2,…` plus `query` (e.g. `?restartDelay=0`). */
  url(query?: string): string
  destroy(): Promise<void>
}

/** Stops every server of a group that did start, when another of the group did not. */
async function allOrNone(starts: Promise<RedisServer>[]): Promise<RedisServer[]> {
  const settled = await Promise.allSettled(starts)
  const failed = settled.find((s) => s.status === 'rejected')
  if (failed === undefined) return settled.map((s) => (s as PromiseFulfilledResult<RedisServer>).value)
  await Promise.all(settled.map((s) => (s.status === 'fulfilled' ? s.value.destroy() : undefined)))
  throw failed.reason
}

export async function startRedisNodes(count: number): Promise<RedisNodes> {
  const servers = await allOrNone(Array.from({ length: count }, () => startRedis()))
  return {
    servers,
    url: (query = '') => `redlock://${servers.map((s) => `127.0.0.1:${s.port}`).join(',')}${query}`,
    destroy: async () => {
      await Promise.all(servers.map((s) => s.destroy()))
    },
  }
}

export interface RedisCluster {
  readonly nodes: RedisServer[]
  /** A seed URL for the cluster (`?cluster=true`). */
  readonly url: string
  destroy(): Promise<void>
}

/** Whether the cluster node on `port` reports `cluster_state:ok`. */
async function clusterOk(port: number): Promise<boolean> {
  const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 0, commandTimeout: 1000 })
  client.on('error', () => {})
  try {
    return /cluster_state:ok/.test(await client.cluster('INFO'))
  } finally {
    client.disconnect()
  }
}

/** Starts a 3-master Redis Cluster (no replicas) with `redis-cli --cluster create`. */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const cli = requireBinary('redis-cli', INSTALL)
  const clusterNode = () =>
    startRedisServer(
      {},
      {
        ports: 1,
        args: ([bus]) => [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--cluster-port',
          String(bus),
        ],
      },
    )
  const nodes = await allOrNone(Array.from({ length: masters }, clusterNode))
  const destroy = async () => {
    await Promise.all(nodes.map((n) => n.destroy()))
  }
  try {
    const addresses = nodes.map((n) => `127.0.0.1:${n.port}`)
    await promisify(execFile)(cli, [
      '--cluster',
      'create',
      ...addresses,
      '--cluster-replicas',
      '0',
      '--cluster-yes',
    ])
    for (const node of nodes) {
      await waitUntil(
        () => clusterOk(node.port),
        () => `cluster node ${node.port} to reach cluster_state:ok${logTail(node.log())}`,
        { withinMs: 20_000, everyMs: 50 },
      )
    }
  } catch (error) {
    await destroy()
    throw error
  }
  return { nodes, url: `redis://127.0.0.1:${nodes[0]!.port}?cluster=true`, destroy }
}
