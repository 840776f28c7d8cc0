import { connect, createServer, type Server, type Socket } from 'node:net'

export type ProxyMode =
  /** Forward both ways. */
  | 'pass'
  /** Forward requests, swallow replies: the server applies the command, the client never hears back. */
  | 'drop-replies'
  /** Forward nothing either way (a partition that leaves connections open). */
  | 'blackhole'

/** A TCP proxy on loopback between clients and one server, for lost replies, partitions and latency. */
export interface Proxy {
  readonly port: number
  mode: ProxyMode
  /** Delay added to every chunk in both directions, in ms. */
  delayMs: number
  /** Drops every open connection (clients see a reset). */
  cut(): void
  close(): Promise<void>
}

export async function startProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<Proxy> {
  const sockets = new Set<Socket>()
  const state = { mode: 'pass' as ProxyMode, delayMs: 0 }
  const relay = (from: Socket, to: Socket, isReply: boolean) => {
    // Bytes keep their order when the delay changes: a chunk never overtakes one delayed before it (a
    // reordered stream would pair replies with the wrong commands).
    let lastAt = 0
    from.on('data', (chunk) => {
      if (state.mode === 'blackhole' || (isReply && state.mode === 'drop-replies')) return
      const at = Math.max(performance.now() + state.delayMs, lastAt)
      lastAt = at
      const wait = at - performance.now()
      if (wait > 0) setTimeout(() => to.write(chunk), wait)
      else to.write(chunk)
    })
  }
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, targetHost)
    sockets.add(client)
    sockets.add(upstream)
    relay(client, upstream, false)
    relay(upstream, client, true)
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on('close', end).on('error', end)
    upstream.on('close', end).on('error', end)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  const port = typeof address === 'object' && address ? address.port : 0
  return {
    port,
    get mode() {
      return state.mode
    },
    set mode(mode: ProxyMode) {
      state.mode = mode
    },
    get delayMs() {
      return state.delayMs
    },
    set delayMs(ms: number) {
      state.delayMs = ms
    },
    cut() {
      for (const socket of sockets) socket.destroy()
      sockets.clear()
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resolve())
      }),
  }
}
