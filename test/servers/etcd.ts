/**
 * Real etcd members for the tests: a single node or a cluster, each member on loopback ports in its own
 * temp folder. A cluster's start is retried on fresh ports as a whole (every member names every peer's
 * port), and every readiness error carries the member's log tail.
 */
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { get } from 'node:https'
import { tempDir } from '../support/temp.js'
import { waitUntil } from '../support/wait.js'
import { type PeerLinks, startPeerLinks } from './etcd-peers.js'
import { onFreshPorts, type PickPorts } from './ports.js'
import { againOnPort, FolderServer, requireBinary, ServerProcess } from './process.js'

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
  /**
   * Cuts member `node` off from the other members (clusters started with `peerLinks`): the bytes between
   * them are dropped, the connections stay open, the clients' links stay up. Returns the heal.
   */
  isolate(node: number): () => void
  destroy(): Promise<void>
}

/**
 * Raft's timing: `fast` (heartbeat 50 ms, election timeout 500 ms: a killed leader is replaced sooner, so
 * fault tests wait less) or etcd's `defaults` (100 ms, 1000 ms: what deployments run, under which a
 * leader's loss outlives more of the client's calls).
 */
export type RaftTiming = 'fast' | 'defaults'

export interface EtcdOptions {
  /** Where fresh ports come from. @default freePorts (the OS's) */
  readonly pickPorts?: PickPorts
  /** @default 'fast' */
  readonly raft?: RaftTiming
  /** Member-to-member links through proxies the tests can cut (`EtcdCluster.isolate`). @default false */
  readonly peerLinks?: boolean
  /**
   * Clients over TLS only (`--cert-file/--key-file`, https client URLs; peers stay plain): `endpoints` are
   * then `https://`, and the readiness check trusts `caFile`. `leader()` asks over plain HTTP: not for these.
   */
  readonly tls?: { readonly certFile: string; readonly keyFile: string; readonly caFile: string }
}

async function health(port: number, ca: Buffer | undefined): Promise<boolean> {
  if (ca) return (await httpsGet(`https://127.0.0.1:${port}/health`, ca)).includes('"health":"true"')
  const reply = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) })
  if (!reply.ok) return false
  const body = (await reply.json()) as { health?: string }
  return body.health === 'true'
}

/** The body of a GET over TLS trusting `ca` (fetch takes no CA), within 1 s. */
function httpsGet(url: string, ca: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const request = get(url, { ca, timeout: 1000 }, (reply) => {
      let body = ''
      reply.setEncoding('utf8')
      reply.on('data', (chunk: string) => {
        body += chunk
      })
      reply.on('end', () => resolve(body))
      reply.on('error', reject)
    })
    request.on('timeout', () => request.destroy(new Error(`no answer from ${url} within 1 s`)))
    request.on('error', reject)
  })
}

/** What every member of one cluster shares: the binary, the peer list, the cluster token, raft's timing. */
interface ClusterSpec {
  readonly binary: string
  readonly initialCluster: string
  readonly token: string
  readonly raft: RaftTiming
  readonly tls: EtcdOptions['tls']
  /** `tls`'s CA, read once. */
  readonly ca: Buffer | undefined
}

/** The flags of each timing (etcd's defaults need none). */
const RAFT_FLAGS: Record<RaftTiming, string[]> = {
  fast: ['--heartbeat-interval', '50', '--election-timeout', '500'],
  defaults: [],
}

class RunningMember extends FolderServer implements EtcdMember {
  readonly endpoint: string
  readonly #spec: ClusterSpec
  /** 'new' for its first start, 'existing' once it has data: a restart rejoins. */
  #state: 'new' | 'existing' = 'new'

  constructor(
    readonly name: string,
    readonly clientPort: number,
    readonly peerPort: number,
    /** The peer port the other members dial: its own, or its proxy's. */
    readonly advertisedPeerPort: number,
    spec: ClusterSpec,
  ) {
    super(tempDir(`etcd-${name}`))
    this.endpoint = `127.0.0.1:${clientPort}`
    this.#spec = spec
    this.proc = this.#launch()
  }

  #launch(): ServerProcess {
    const { tls } = this.#spec
    const client = `${tls ? 'https' : 'http'}://${this.endpoint}`
    const peer = `http://127.0.0.1:${this.peerPort}`
    const advertised = `http://127.0.0.1:${this.advertisedPeerPort}`
    const proc = new ServerProcess(
      `etcd ${this.name} (client port ${this.clientPort})`,
      this.#spec.binary,
      [
        ...['--name', this.name, '--data-dir', `${this.dir}/data`],
        ...['--listen-client-urls', client, '--advertise-client-urls', client],
        ...['--listen-peer-urls', peer, '--initial-advertise-peer-urls', advertised],
        ...['--initial-cluster', this.#spec.initialCluster, '--initial-cluster-state', this.#state],
        ...['--initial-cluster-token', this.#spec.token],
        ...RAFT_FLAGS[this.#spec.raft],
        ...(tls ? ['--cert-file', tls.certFile, '--key-file', tls.keyFile] : []),
        ...['--logger', 'zap', '--log-level', 'error'],
      ],
      this.dir,
    )
    this.#state = 'existing'
    return proc
  }

  /** Waits until it answers /health (which needs a leader, so a quorum of its cluster). */
  untilHealthy(withinMs: number): Promise<void> {
    return this.proc.untilReady(() => health(this.clientPort, this.#spec.ca), withinMs)
  }

  async restart(): Promise<void> {
    await this.proc.stop()
    await againOnPort(
      `etcd ${this.name} (client port ${this.clientPort}, peer port ${this.peerPort})`,
      async () => {
        this.proc = this.#launch()
        try {
          await this.untilHealthy(20_000)
        } catch (error) {
          await this.proc.stop()
          throw error
        }
      },
    )
  }

  healthy(): Promise<boolean> {
    return health(this.clientPort, this.#spec.ca).catch(() => false)
  }
}

/** The member that says it leads, if one does now. */
async function leaderNow(members: RunningMember[]): Promise<EtcdMember | undefined> {
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
  return undefined
}

/**
 * One attempt: `size` members on `ports` (client, peer per member), their peers dialed through `links`
 * if given, healthy within 30 s, or none left.
 */
async function startMembers(
  binary: string,
  size: number,
  ports: number[],
  raft: RaftTiming,
  tls: EtcdOptions['tls'],
  links: PeerLinks | undefined,
  onSpawned: (members: RunningMember[]) => void,
): Promise<RunningMember[]> {
  const named = Array.from({ length: size }, (_, i) => ({
    name: `m${i}`,
    clientPort: ports[2 * i]!,
    peerPort: ports[2 * i + 1]!,
    advertisedPeerPort: links?.ports[i] ?? ports[2 * i + 1]!,
  }))
  for (const [i, m] of named.entries()) links?.target(i, m.peerPort)
  const spec: ClusterSpec = {
    binary,
    initialCluster: named.map((m) => `${m.name}=http://127.0.0.1:${m.advertisedPeerPort}`).join(','),
    token: `fencelock-${randomBytes(4).toString('hex')}`,
    raft,
    tls,
    ca: tls ? readFileSync(tls.caFile) : undefined,
  }
  const members = named.map(
    (m) => new RunningMember(m.name, m.clientPort, m.peerPort, m.advertisedPeerPort, spec),
  )
  onSpawned(members)
  try {
    // One member that cannot bind its ports exits at once: the whole attempt fails then, not 30 s later.
    await Promise.all(members.map((m) => m.untilHealthy(30_000)))
    return members
  } catch (error) {
    await Promise.all(members.map((m) => m.destroy()))
    throw error
  }
}

/** Starts `size` etcd members forming one cluster (1 for a single node). */
export async function startEtcd(size = 1, options: EtcdOptions = {}): Promise<EtcdCluster> {
  const binary = requireBinary('etcd', INSTALL)
  requireBinary('etcdctl', INSTALL)
  /** The members of the latest attempt, from their spawn on: the proxies tell a link's dialer by its PID. */
  let spawned: RunningMember[] = []
  const links = options.peerLinks ? await startPeerLinks(size, () => spawned.map((m) => m.pid)) : undefined
  const members = await onFreshPorts(
    size === 1 ? 'etcd' : `a ${size}-member etcd cluster`,
    2 * size,
    (ports) =>
      startMembers(binary, size, ports, options.raft ?? 'fast', options.tls, links, (m) => {
        spawned = m
      }),
    options.pickPorts,
  ).catch(async (error: unknown) => {
    await links?.close()
    throw error
  })
  return {
    members,
    url: (rest = '') => `etcd://${members.map((m) => m.endpoint).join(',')}${rest}`,
    endpoints: members.map((m) => `${options.tls ? 'https' : 'http'}://${m.endpoint}`).join(','),
    async leader() {
      let found: EtcdMember | undefined
      const elected = async () => {
        found = await leaderNow(members)
        return found !== undefined
      }
      await waitUntil(elected, 'an etcd member to lead', { withinMs: 60_000, everyMs: 100 })
      return found!
    },
    isolate(node) {
      if (!links) throw new Error('isolate() needs a cluster started with { peerLinks: true }')
      return links.isolate(node)
    },
    destroy: async () => {
      await Promise.all(members.map((m) => m.destroy()))
      await links?.close()
    },
  }
}
