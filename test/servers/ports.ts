/**
 * Loopback ports for test servers, and the retry that makes their start reliable: a port is picked free,
 * released, then bound by the server, and any other process (a client's outgoing connection, another
 * test's server) can take it in between. Nothing can close that gap from outside the server, so a start
 * that fails is tried again on fresh ports.
 */
import { createServer, type Server } from 'node:net'

/** Where a start gets its ports: `count` distinct ports, free when picked. */
export type PickPorts = (count: number) => Promise<number[]>

/** How many times a server's start is tried, each time on fresh ports. */
export const START_ATTEMPTS = 3

/** Highest port handed out: a Redis Cluster node's default bus port (port + 10000) must fit too. */
const MAX_PORT = 55_534

const listening = (server: Server) =>
  new Promise<number>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      resolve(typeof address === 'object' && address ? address.port : 0)
    })
  })

/**
 * `count` distinct free ports on loopback (the OS picks them). All are held until all are picked, so the
 * OS cannot hand out one port twice in one pick.
 */
export const freePorts: PickPorts = async (count) => {
  const held: Server[] = []
  const ports = new Set<number>()
  try {
    while (ports.size < count) {
      const server = createServer()
      held.push(server)
      const port = await listening(server)
      if (port > 0 && port <= MAX_PORT) ports.add(port)
    }
  } finally {
    await Promise.all(held.map((s) => new Promise((resolve) => s.close(resolve))))
  }
  return [...ports]
}

/** One free TCP port on loopback. */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1)
  return port!
}

/**
 * Runs `start` with `count` fresh ports, up to START_ATTEMPTS times: a start that fails (a port taken
 * in between, a server not ready in time) must clean up after itself and throw; the next attempt gets
 * new ports. The final error keeps every attempt's message (each with its server's log tail).
 */
export async function onFreshPorts<T>(
  what: string,
  count: number,
  start: (ports: number[]) => Promise<T>,
  pick: PickPorts = freePorts,
): Promise<T> {
  const failures: unknown[] = []
  while (failures.length < START_ATTEMPTS) {
    try {
      return await start(await pick(count))
    } catch (error) {
      failures.push(error)
    }
  }
  const messages = failures.map((e, i) => `attempt ${i + 1}: ${(e as Error).message}`).join('\n')
  throw new Error(`${what} did not start in ${START_ATTEMPTS} attempts, each on fresh ports:\n${messages}`, {
    cause: failures.at(-1),
  })
}
