import { createServer, type Server } from 'node:net'
import { freePorts, type PickPorts } from './ports.js'

/** A listener of our own on `port` (or a free one): what another process taking a server's port looks like. */
export async function squat(port = 0): Promise<{ port: number; close(): Promise<void> }> {
  const server: Server = createServer((socket) => socket.destroy())
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', resolve)
  })
  const address = server.address()
  return {
    port: typeof address === 'object' && address ? address.port : port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}

/**
 * A port picker whose first pick holds `taken` (a port another process holds by then) at index `at`;
 * later picks are all fresh. `picks` counts them.
 */
export function takenFirst(taken: number, at = 0): PickPorts & { picks: number } {
  const pick = async (count: number) => {
    pick.picks++
    const ports = await freePorts(count)
    if (pick.picks === 1) ports[at] = taken
    return ports
  }
  pick.picks = 0
  return pick
}
