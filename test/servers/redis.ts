import type { ChildProcess } from 'node:child_process'
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Redis } from 'ioredis'
import {
  freePort,
  makeTempDir,
  removeDir,
  requireBinary,
  startProcess,
  stopProcess,
  waitUntil,
} from './common.js'

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
  readonly port?: number
}

async function pingable(port: number): Promise<boolean> {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  })
  let seen = ''
  client.on('error', (error: Error) => {
    seen += error.message
  })
  try {
    await client.connect()
    return (await client.ping()) === 'PONG'
  } catch (error) {
    // A server that asks for a password is up (ioredis reports that as an event, then closes).
    return /NOAUTH|WRONGPASS/.test(`${(error as Error).message} ${seen}`)
  } finally {
    client.disconnect()
  }
}

/** Starts a real redis-server on a free loopback port in its own temp folder, without persistence by default. */
export async function startRedis(options: RedisServerOptions = {}): Promise<RedisServer> {
  const binary = requireBinary('redis-server', INSTALL)
  const port = options.port ?? (await freePort())
  const dir = makeTempDir('redis')
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'no',
    '--protected-mode',
    'no',
    ...(options.args ?? []),
  ]
  let proc: { child: ChildProcess; output: () => string }
  const launch = async () => {
    proc = startProcess(binary, args, dir)
    await waitUntil(
      () => pingable(port),
      10_000,
      () => `redis-server on ${port} did not answer: ${proc.output()}`,
    )
  }
  await launch()
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    dir,
    get pid() {
      return proc.child.pid ?? -1
    },
    stop: () => stopProcess(proc.child),
    signal: (s) => {
      proc.child.kill(s)
    },
    async restart() {
      await stopProcess(proc.child)
      await launch()
    },
    async destroy() {
      await stopProcess(proc.child)
      removeDir(dir)
    },
    log: () => proc.output(),
  }
}

export interface RedisCluster {
  readonly nodes: RedisServer[]
  /** A seed URL for the cluster (`?cluster=true`). */
  readonly url: string
  destroy(): Promise<void>
}

/** Starts a 3-master Redis Cluster (no replicas) with `redis-cli --cluster create`. */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  const cli = requireBinary('redis-cli', INSTALL)
  const nodes: RedisServer[] = []
  for (let i = 0; i < masters; i++) {
    const busPort = await freePort()
    nodes.push(
      await startRedis({
        args: [
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          'nodes.conf',
          '--cluster-port',
          String(busPort),
        ],
      }),
    )
  }
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
      async () => {
        const client = new Redis({ port: node.port, host: '127.0.0.1', maxRetriesPerRequest: 0 })
        client.on('error', () => {})
        try {
          return /cluster_state:ok/.test(await client.cluster('INFO'))
        } finally {
          client.disconnect()
        }
      },
      20_000,
      () => `cluster node ${node.port} never reached cluster_state:ok`,
    )
  }
  return {
    nodes,
    url: `redis://127.0.0.1:${nodes[0]!.port}?cluster=true`,
    destroy: async () => {
      await Promise.all(nodes.map((n) => n.destroy()))
    },
  }
}

export const redisDataDir = (server: RedisServer, file: string) => join(server.dir, file)

/** Independent Redis masters for Redlock, started side by side. */
export interface RedisNodes {
  readonly servers: RedisServer[]
  /** `redlock://127.0.0.1:p1,127.0.0.1:p2,…` plus `query` (e.g. `?restartDelay=0`). */
  url(query?: string): string
  destroy(): Promise<void>
}

export async function startRedisNodes(count: number): Promise<RedisNodes> {
  const servers = await Promise.all(Array.from({ length: count }, () => startRedis()))
  return {
    servers,
    url: (query = '') => `redlock://${servers.map((s) => `127.0.0.1:${s.port}`).join(',')}${query}`,
    destroy: async () => {
      await Promise.all(servers.map((s) => s.destroy()))
    },
  }
}
