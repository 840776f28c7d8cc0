/**
 * The links between the members of a test etcd cluster, through TCP proxies the tests can cut: each member
 * advertises a proxy in front of its own peer port, so every connection between two members passes one.
 * The member that dialed a connection is told by its source port (the process owning that socket, read
 * from /proc), so cutting a member off drops the bytes of every connection it dialed and of every one
 * dialed to it, while the connections stay open (a partition, not a reset) and the clients' links (the
 * client ports) stay up. Healing resets the connections that lost bytes (their streams are broken, as TCP
 * would break them after a long partition): the members dial again.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { connect, createServer, type Server, type Socket } from 'node:net'

/** One proxy per member, in member order. */
export interface PeerLinks {
  /** The port each member advertises to the others (its proxy's). */
  readonly ports: readonly number[]
  /** Points member `i`'s proxy at its real peer port (set before it starts, again on fresh ports). */
  target(i: number, peerPort: number): void
  /** Cuts member `i` off from the others; the function returned heals the cut. */
  isolate(i: number): () => void
  close(): Promise<void>
}

/** The inodes of the loopback TCP sockets bound to each local port (IPv4 and IPv6). */
function socketInodes(): Map<number, string[]> {
  const byPort = new Map<number, string[]>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = ''
    try {
      text = readFileSync(table, 'utf8')
    } catch {
      continue
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/)
      const local = fields[1]
      const inode = fields[9]
      if (!local || !inode) continue
      const port = Number.parseInt(local.slice(local.lastIndexOf(':') + 1), 16)
      byPort.set(port, [...(byPort.get(port) ?? []), inode])
    }
  }
  return byPort
}

/** Whether process `pid` has one of these socket inodes open. */
function owns(pid: number, inodes: readonly string[]): boolean {
  let fds: string[]
  try {
    fds = readdirSync(`/proc/${pid}/fd`)
  } catch {
    return false
  }
  const wanted = new Set(inodes.map((inode) => `socket:[${inode}]`))
  for (const fd of fds) {
    try {
      if (wanted.has(readlinkSync(`/proc/${pid}/fd/${fd}`))) return true
    } catch {
      // Closed meanwhile.
    }
  }
  return false
}

/** Starts one proxy per member; `pids()` names the members' processes now (a restart changes them). */
export async function startPeerLinks(size: number, pids: () => readonly number[]): Promise<PeerLinks> {
  const targets: number[] = Array.from({ length: size }, () => 0)
  const cut = new Set<number>()
  /** Every open link: its two members (the dialer may be unknown) and its two sockets. */
  const links = new Set<{ from: number | undefined; to: number; sockets: Socket[]; lost: boolean }>()
  const dialer = (port: number | undefined): number | undefined => {
    const inodes = port === undefined ? undefined : socketInodes().get(port)
    if (!inodes) return undefined
    const index = pids().findIndex((pid) => owns(pid, inodes))
    return index < 0 ? undefined : index
  }
  const servers: Server[] = []
  for (let to = 0; to < size; to++) {
    const server = createServer({ noDelay: true }, (incoming) => {
      const outgoing = connect({ port: targets[to]!, host: '127.0.0.1', noDelay: true })
      const link = { from: dialer(incoming.remotePort), to, sockets: [incoming, outgoing], lost: false }
      links.add(link)
      const relay = (source: Socket, sink: Socket) =>
        source.on('data', (chunk: Buffer) => {
          if (cut.has(link.to) || (link.from !== undefined && cut.has(link.from))) {
            link.lost = true
            return
          }
          sink.write(chunk)
        })
      relay(incoming, outgoing)
      relay(outgoing, incoming)
      const end = () => {
        incoming.destroy()
        outgoing.destroy()
        links.delete(link)
      }
      incoming.on('close', end).on('error', end)
      outgoing.on('close', end).on('error', end)
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    servers.push(server)
  }
  const portOf = (server: Server) => {
    const address = server.address()
    return typeof address === 'object' && address ? address.port : 0
  }
  return {
    ports: servers.map(portOf),
    target(i, peerPort) {
      targets[i] = peerPort
    },
    isolate(i) {
      cut.add(i)
      return () => {
        cut.delete(i)
        for (const link of [...links]) {
          if (!link.lost) continue
          for (const socket of link.sockets) socket.destroy()
          links.delete(link)
        }
      }
    },
    close: async () => {
      for (const link of links) for (const socket of link.sockets) socket.destroy()
      links.clear()
      await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))))
    },
  }
}
