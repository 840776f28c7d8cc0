import type { ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import {
  freePort,
  makeTempDir,
  removeDir,
  requireBinary,
  startProcess,
  stopProcess,
  waitUntil,
} from './common.js'

const INSTALL = 'apt-get install -y etcd-server etcd-client'

/** One etcd member started by the tests. */
export interface EtcdMember {
  readonly name: string
  readonly clientPort: number
  readonly peerPort: number
  readonly endpoint: string
  readonly dir: string
  readonly pid: number
  /** Sends a signal (SIGKILL for a crash, SIGSTOP/SIGCONT for a pause). */
  signal(signal: NodeJS.Signals): void
  stop(): Promise<void>
  /** Starts it again with its data (it rejoins its cluster). */
  restart(): Promise<void>
  /** Whether it answers /health. */
  healthy(): Promise<boolean>
  /** The tail of its output (its log), for a failing test to keep. */
  log(): string
}

/** A single etcd or a cluster of members, each on loopback ports in its own temp folder. */
export interface EtcdCluster {
  readonly members: EtcdMember[]
  /** `etcd://127.0.0.1:p1,127.0.0.1:p2,…` plus `rest` (a path, a query). */
  url(rest?: string): string
  /** The client endpoints, comma-separated, for etcdctl. */
  readonly endpoints: string
  /** The member that leads now (asks each member's /v3 maintenance status). */
  leader(): Promise<EtcdMember>
  destroy(): Promise<void>
}

async function health(port: number): Promise<boolean> {
  const reply = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) })
  if (!reply.ok) return false
  const body = (await reply.json()) as { health?: string }
  return body.health === 'true'
}

/** Starts `size` etcd members forming one cluster (1 for a single node). */
export async function startEtcd(size = 1): Promise<EtcdCluster> {
  const binary = requireBinary('etcd', INSTALL)
  requireBinary('etcdctl', INSTALL)
  const token = `fencelock-${randomBytes(4).toString('hex')}`
  const specs = await Promise.all(
    Array.from({ length: size }, async (_, i) => ({
      name: `m${i}`,
      clientPort: await freePort(),
      peerPort: await freePort(),
      dir: makeTempDir(`etcd-m${i}`),
    })),
  )
  const initialCluster = specs.map((s) => `${s.name}=http://127.0.0.1:${s.peerPort}`).join(',')
  const members = specs.map((spec): EtcdMember => {
    let proc: { child: ChildProcess; output: () => string }
    let state: 'new' | 'existing' = 'new'
    const launch = () => {
      proc = startProcess(
        binary,
        [
          '--name',
          spec.name,
          '--data-dir',
          `${spec.dir}/data`,
          '--listen-client-urls',
          `http://127.0.0.1:${spec.clientPort}`,
          '--advertise-client-urls',
          `http://127.0.0.1:${spec.clientPort}`,
          '--listen-peer-urls',
          `http://127.0.0.1:${spec.peerPort}`,
          '--initial-advertise-peer-urls',
          `http://127.0.0.1:${spec.peerPort}`,
          '--initial-cluster',
          initialCluster,
          '--initial-cluster-state',
          state,
          '--initial-cluster-token',
          token,
          // Fast elections: the fault tests kill leaders and wait for a new one.
          '--heartbeat-interval',
          '50',
          '--election-timeout',
          '500',
          '--logger',
          'zap',
          '--log-level',
          'error',
        ],
        spec.dir,
      )
      state = 'existing'
    }
    launch()
    return {
      ...spec,
      endpoint: `127.0.0.1:${spec.clientPort}`,
      get pid() {
        return proc.child.pid ?? -1
      },
      signal: (s) => {
        proc.child.kill(s)
      },
      stop: () => stopProcess(proc.child),
      async restart() {
        await stopProcess(proc.child)
        launch()
        await waitUntil(
          () => health(spec.clientPort),
          20_000,
          () => `etcd ${spec.name} did not come back: ${proc.output()}`,
        )
      },
      healthy: () => health(spec.clientPort).catch(() => false),
      log: () => proc.output(),
    }
  })
  const destroy = async () => {
    await Promise.all(members.map((m) => m.stop()))
    for (const m of members) removeDir(m.dir)
  }
  try {
    await Promise.all(
      members.map((m) =>
        waitUntil(
          () => health(m.clientPort),
          30_000,
          () => `etcd ${m.name} on ${m.clientPort} did not become healthy`,
        ),
      ),
    )
  } catch (error) {
    await destroy()
    throw error
  }
  return {
    members,
    url: (rest = '') => `etcd://${members.map((m) => m.endpoint).join(',')}${rest}`,
    endpoints: members.map((m) => `http://${m.endpoint}`).join(','),
    async leader() {
      for (;;) {
        for (const m of members) {
          const status = await fetch(`http://${m.endpoint}/v3/maintenance/status`, {
            method: 'POST',
            body: '{}',
            signal: AbortSignal.timeout(1000),
          })
            .then((r) => r.json() as Promise<{ header?: { member_id?: string }; leader?: string }>)
            .catch(() => undefined)
          if (status?.leader && status.header?.member_id === status.leader) return m
        }
        await new Promise((r) => setTimeout(r, 100))
      }
    },
    destroy,
  }
}
