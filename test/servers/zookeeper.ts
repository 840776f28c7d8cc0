/**
 * Real ZooKeeper servers for the tests (Debian's `zookeeper` 3.8 on Java 17): a standalone server or an
 * ensemble of three, each member on loopback ports in its own temp folder, started as a child process
 * (never daemonised) and stopped by PID. An ensemble's start is retried on fresh ports as a whole (every
 * member names every peer's ports), and every readiness error carries the member's log tail (log4j to the
 * console through slf4j-log4j12).
 *
 * Partitionable ensembles (`partitionable`): each member reaches each peer's quorum and election ports
 * through a TCP proxy of its own (its `server.N=` lines name the proxies; its own line its real ports), so
 * `isolate(i)` can drop every byte between member i and the others while the connections stay open, and
 * the clients' links stay up. One gap, ZooKeeper's: an election connection is kept only from the larger id
 * to the smaller, and a smaller id's connection is answered by a connection back to the address it
 * advertised (its real port), not through a proxy. The leader-follower links, which carry the syncs, the
 * proposals and the session touches, always go through the proxies.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs'
import { fourLetterWord, parseSrvr } from '../../src/backends/zookeeper/four-letter.js'
import { startProxy, type Proxy as TcpProxy } from '../support/proxy.js'
import { tempDir } from '../support/temp.js'
import { waitUntil } from '../support/wait.js'
import { onFreshPorts, type PickPorts } from './ports.js'
import { againOnPort, FolderServer, requireBinary, ServerProcess } from './process.js'

const INSTALL = 'apt-get install -y zookeeper openjdk-17-jre-headless'
const JAR = '/usr/share/java/zookeeper.jar'
/** The server, its configuration folder (log4j.properties) and the logging bridge that gives us its log. */
const CLASS_PATH = [
  '/etc/zookeeper/conf',
  JAR,
  '/usr/share/java/slf4j-log4j12.jar',
  '/usr/share/java/log4j-1.2.jar',
].join(':')

/**
 * The tick: sessions may last 2 to 20 ticks unless configured, elections and syncs are counted in ticks.
 * 200 ms makes a leader change take about a second, and lets tests ask for sessions down to 400 ms.
 */
export const TICK_MS = 200
/** The longest session a client may negotiate (the default would be 20 ticks: 4 s). */
export const MAX_SESSION_MS = 60_000

/** One ZooKeeper member started by the tests. */
export interface ZooKeeperMember {
  /** Its id in the ensemble (`myid`), 1-based. */
  readonly id: number
  readonly clientPort: number
  /** `127.0.0.1:<client port>`. */
  readonly endpoint: string
  readonly dir: string
  readonly pid: number
  /** Sends a signal (SIGKILL for a crash, SIGSTOP/SIGCONT for a pause). */
  signal(signal: NodeJS.Signals): void
  stop(): Promise<void>
  /** Starts it again on the same ports with its data (it rejoins its ensemble). */
  restart(): Promise<void>
  /** Its mode as `srvr` says it (`standalone`, `leader`, `follower`), undefined while it does not serve. */
  mode(): Promise<string | undefined>
  /** The tail of its output (its log), for a failing test to keep. */
  log(): string
}

/** A standalone server or an ensemble. */
export interface ZooKeeperEnsemble {
  /**
   * Cuts member `index` (0-based) off from the other members (partitionable ensembles): every byte
   * between them is dropped, the connections stay open. Resolves to a function that heals the cut (the
   * members' connections are then reset, so they start again from a clean stream).
   */
  isolate(index: number): () => Promise<void>
  readonly members: ZooKeeperMember[]
  /** `zookeeper://127.0.0.1:p1,127.0.0.1:p2,…` plus `rest` (a path, a query). */
  url(rest?: string): string
  /** `127.0.0.1:p1,…`: the connection string of a ZooKeeper client. */
  readonly connectString: string
  /** The member serving as leader now (standalone: the only one); waits for an election to finish. */
  leader(): Promise<ZooKeeperMember>
  /** Waits until every member serves (after a restart or a crash). */
  serving(withinMs?: number): Promise<void>
  destroy(): Promise<void>
}

export interface ZooKeeperOptions {
  /** Where fresh ports come from. @default freePorts (the OS's) */
  readonly pickPorts?: PickPorts
  /** `tickTime` in ms. @default TICK_MS */
  readonly tickMs?: number
  /** `syncLimit` in ticks: how long a follower cut off from its leader serves on. @default 10 */
  readonly syncLimit?: number
  /** `maxSessionTimeout` in ms. @default MAX_SESSION_MS */
  readonly maxSessionMs?: number
  /** The members reach each other through proxies that `isolate` can blackhole. @default false */
  readonly partitionable?: boolean
}

/** The server settings a member's zoo.cfg takes from `ZooKeeperOptions`. */
type Settings = Required<Pick<ZooKeeperOptions, 'tickMs' | 'syncLimit' | 'maxSessionMs'>>

/** The member's mode, or undefined when it does not answer or does not serve. */
export async function modeOf(port: number): Promise<string | undefined> {
  try {
    return parseSrvr(await fourLetterWord('127.0.0.1', port, 'srvr', AbortSignal.timeout(1000))).mode
  } catch {
    return undefined
  }
}

/** Ports of one member: the client's, and in an ensemble the quorum and election ports. */
interface MemberPorts {
  readonly id: number
  readonly client: number
  readonly quorum: number
  readonly election: number
}

class RunningMember extends FolderServer implements ZooKeeperMember {
  readonly id: number
  readonly clientPort: number
  readonly endpoint: string

  constructor(
    me: MemberPorts,
    readonly peers: readonly MemberPorts[],
    settings: Settings,
  ) {
    super(tempDir(`zookeeper-${me.id}`))
    this.id = me.id
    this.clientPort = me.client
    this.endpoint = `127.0.0.1:${me.client}`
    mkdirSync(`${this.dir}/data`)
    writeFileSync(`${this.dir}/data/myid`, `${me.id}\n`)
    const lines = [
      `tickTime=${settings.tickMs}`,
      'initLimit=20',
      `syncLimit=${settings.syncLimit}`,
      `dataDir=${this.dir}/data`,
      `clientPort=${me.client}`,
      'clientPortAddress=127.0.0.1',
      // Its admin web server listens on 8080 by default: members would clash (and we do not use it).
      'admin.enableServer=false',
      // `wchp` lists the sessions watching each path (a test waits for a Curator watch to be in place).
      '4lw.commands.whitelist=srvr,ruok,mntr,cons,wchp',
      `maxSessionTimeout=${settings.maxSessionMs}`,
      // No snapshot purging, no fsync wait warnings worth having in a test's log.
      'forceSync=no',
      ...(peers.length > 1 ? peers.map((p) => `server.${p.id}=127.0.0.1:${p.quorum}:${p.election}`) : []),
    ]
    writeFileSync(`${this.dir}/zoo.cfg`, `${lines.join('\n')}\n`)
    this.proc = this.#launch()
  }

  #launch(): ServerProcess {
    return new ServerProcess(
      `zookeeper ${this.id} (client port ${this.clientPort})`,
      requireBinary('java', INSTALL),
      [
        '-Xmx256m',
        // Starts in a fraction of the time on a busy machine; the server needs no JIT warm-up in tests.
        '-XX:TieredStopAtLevel=1',
        '-Dzookeeper.root.logger=INFO,CONSOLE',
        '-cp',
        CLASS_PATH,
        'org.apache.zookeeper.server.quorum.QuorumPeerMain',
        `${this.dir}/zoo.cfg`,
      ],
      this.dir,
    )
  }

  /** Waits until `srvr` reports a mode: standalone, or leader/follower (so a quorum formed). */
  untilServing(withinMs: number): Promise<void> {
    return this.proc.untilReady(async () => (await modeOf(this.clientPort)) !== undefined, withinMs)
  }

  async restart(): Promise<void> {
    await this.proc.stop()
    await againOnPort(`zookeeper ${this.id} (client port ${this.clientPort})`, async () => {
      this.proc = this.#launch()
      try {
        // An ensemble member serves once it has found a leader: with the others down too, restart them
        // together (each waits for the quorum they form).
        await this.untilServing(60_000)
      } catch (error) {
        await this.proc.stop()
        throw error
      }
    })
  }

  mode(): Promise<string | undefined> {
    return modeOf(this.clientPort)
  }
}

/** Fails loudly when the server or Java is missing: tests never skip a backend silently. */
function requireZooKeeper(): void {
  requireBinary('java', INSTALL)
  if (!existsSync(JAR)) {
    throw new Error(`${JAR} is not installed. Run "npm run test:all", which installs it (${INSTALL}).`)
  }
}

/** The proxies member `from` reaches member `to` through (partitionable ensembles). */
interface PeerLink {
  readonly from: number
  readonly to: number
  readonly proxies: readonly TcpProxy[]
}

/** One attempt: `size` members on `ports` (client, quorum, election per member), serving within 60 s. */
async function startMembers(
  size: number,
  ports: number[],
  settings: Settings,
  partitionable: boolean,
): Promise<{ members: RunningMember[]; links: PeerLink[] }> {
  const all: MemberPorts[] = Array.from({ length: size }, (_, i) => ({
    id: i + 1,
    client: ports[3 * i]!,
    quorum: ports[3 * i + 1]!,
    election: ports[3 * i + 2]!,
  }))
  const links: PeerLink[] = []
  if (partitionable) {
    for (const from of all) {
      for (const to of all) {
        if (from === to) continue
        links.push({
          from: from.id,
          to: to.id,
          proxies: [await startProxy(to.quorum), await startProxy(to.election)],
        })
      }
    }
  }
  // Each member's view of its peers: through its own proxies when partitionable.
  const viewOf = (me: MemberPorts) =>
    all.map((peer) => {
      const link = links.find((l) => l.from === me.id && l.to === peer.id)
      return link ? { ...peer, quorum: link.proxies[0]!.port, election: link.proxies[1]!.port } : peer
    })
  const members = all.map((me) => new RunningMember(me, viewOf(me), settings))
  try {
    // One member that cannot bind its client port exits at once: the whole attempt fails then.
    await Promise.all(members.map((m) => m.untilServing(60_000)))
    return { members, links }
  } catch (error) {
    await Promise.all(members.map((m) => m.destroy()))
    await Promise.all(links.flatMap((l) => l.proxies.map((p) => p.close())))
    throw error
  }
}

/** Starts a standalone ZooKeeper (`size` 1) or an ensemble of `size` members. */
export async function startZooKeeper(size = 1, options: ZooKeeperOptions = {}): Promise<ZooKeeperEnsemble> {
  requireZooKeeper()
  const settings: Settings = {
    tickMs: options.tickMs ?? TICK_MS,
    syncLimit: options.syncLimit ?? 10,
    maxSessionMs: options.maxSessionMs ?? MAX_SESSION_MS,
  }
  const { members, links } = await onFreshPorts(
    size === 1 ? 'zookeeper' : `a ${size}-member zookeeper ensemble`,
    3 * size,
    (ports) => startMembers(size, ports, settings, (options.partitionable ?? false) && size > 1),
    options.pickPorts,
  )
  const connectString = members.map((m) => m.endpoint).join(',')
  const serving = async (withinMs = 60_000) => {
    const all = async () => (await Promise.all(members.map((m) => m.mode()))).every((m) => m !== undefined)
    await waitUntil(
      all,
      () => `every zookeeper member to serve${members.map((m) => m.log().slice(-600)).join('\n')}`,
      {
        withinMs,
        everyMs: 100,
      },
    )
  }
  return {
    members,
    connectString,
    url: (rest = '') => `zookeeper://${connectString}${rest}`,
    serving,
    isolate(index) {
      const id = members[index]?.id
      const cut = links.filter((l) => l.from === id || l.to === id).flatMap((l) => l.proxies)
      if (cut.length === 0)
        throw new Error(`member ${index} cannot be isolated: start the ensemble partitionable`)
      for (const proxy of cut) proxy.mode = 'blackhole'
      return async () => {
        for (const proxy of cut) {
          proxy.mode = 'pass'
          // Bytes were dropped mid-stream: the members connect again on clean streams.
          proxy.cut()
        }
      }
    },
    async leader() {
      let found: ZooKeeperMember | undefined
      const elected = async () => {
        for (const m of members) {
          const mode = await m.mode()
          if (mode === 'leader' || mode === 'standalone') {
            found = m
            return true
          }
        }
        return false
      }
      await waitUntil(elected, 'a zookeeper member to lead', { withinMs: 60_000, everyMs: 100 })
      return found!
    },
    destroy: async () => {
      await Promise.all(members.map((m) => m.destroy()))
      await Promise.all(links.flatMap((l) => l.proxies.map((p) => p.close())))
    },
  }
}
