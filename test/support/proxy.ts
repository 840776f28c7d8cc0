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
  /**
   * Decides each chunk before the mode does: false swallows it. For a fault at one exact request (a
   * connection's first statement after its handshake); undefined lets the mode alone decide.
   */
  filter: ((chunk: Buffer, direction: 'request' | 'reply') => boolean) | undefined
  /** Drops every open connection (clients see a reset). */
  cut(): void
  close(): Promise<void>
}

export async function startProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<Proxy> {
  const sockets = new Set<Socket>()
  const state: Pick<Proxy, 'mode' | 'delayMs' | 'filter'> = { mode: 'pass', delayMs: 0, filter: undefined }
  const relay = (from: Socket, to: Socket, isReply: boolean) => {
    // Bytes keep their order when the delay changes: chunks wait in one queue drained by one timer, so a
    // chunk never overtakes one delayed before it (separate timers can fire out of order: a reordered
    // stream runs commands out of order, or pairs replies with the wrong commands).
    const queue: Array<{ at: number; chunk: Buffer }> = []
    let timer: NodeJS.Timeout | undefined
    const drain = () => {
      timer = undefined
      const t = performance.now()
      while (queue.length > 0 && queue[0]!.at <= t) to.write(queue.shift()!.chunk)
      if (queue.length > 0) timer = setTimeout(drain, queue[0]!.at - t)
    }
    from.on('data', (chunk: Buffer) => {
      if (state.filter?.(chunk, isReply ? 'reply' : 'request') === false) return
      if (state.mode === 'blackhole' || (isReply && state.mode === 'drop-replies')) return
      if (queue.length === 0 && state.delayMs <= 0) {
        to.write(chunk)
        return
      }
      const at = Math.max(performance.now() + state.delayMs, queue.at(-1)?.at ?? 0)
      queue.push({ at, chunk })
      if (timer === undefined) timer = setTimeout(drain, at - performance.now())
    })
  }
  // No Nagle on either leg: a client that sets TCP_NODELAY itself (gRPC does) writes a request as several
  // small segments (HTTP/2 frames); held back until the first is acknowledged, and the acknowledgement
  // delayed in turn, each waited ~40 ms at the proxy (etcd's chaos runs made a third of Redis's operations).
  const server: Server = createServer({ noDelay: true }, (client) => {
    const upstream = connect({ port: targetPort, host: targetHost, noDelay: true })
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
    get filter() {
      return state.filter
    },
    set filter(filter) {
      state.filter = filter
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
