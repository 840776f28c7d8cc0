/**
 * One Redis server for a test file of the Redis backend's own tests (the conformance suite has its kit):
 * started before the file's tests, with an admin connection that looks at keys behind the backend's back,
 * and the clients, backends and connections the tests make, all closed after them.
 */
import { after, before } from 'node:test'
import { Redis } from 'ioredis'
import { type RedisBackend, redisBackend } from '../../../src/backends/redis/index.js'
import { type ClientOptions, createLockClient, type LockClient } from '../../../src/index.js'
import { type RedisServer, startRedis } from '../../servers/redis.js'

export interface RedisTestServer {
  /** The server, once started. */
  readonly server: RedisServer
  /** A connection of the test's own, to read and change keys. */
  readonly admin: Redis
  /** A client of the server's URL, closed after the file. */
  client(options?: ClientOptions): LockClient
  /** A new connection, disconnected after the file. */
  connection(): Redis
  /** A backend over `client` (a new connection when not given), closed after the file. */
  backend(client?: Redis): RedisBackend
}

/** Starts a server for the file (or describe block) it is called in. */
export function redisTestServer(): RedisTestServer {
  let started: { server: RedisServer; admin: Redis } | undefined
  const clients: LockClient[] = []
  const backends: RedisBackend[] = []
  const connections: Redis[] = []
  const ready = () => {
    if (!started) throw new Error('redis: the server is not started (call redisTestServer at the top level)')
    return started
  }
  before(async () => {
    const server = await startRedis()
    started = { server, admin: new Redis(server.port, '127.0.0.1') }
  })
  after(async () => {
    await Promise.all(clients.map((c) => c.close()))
    await Promise.all(backends.map((b) => b.close()))
    for (const c of connections) c.disconnect()
    started?.admin.disconnect()
    await started?.server.destroy()
  })
  const connection = () => {
    const redis = new Redis(ready().server.port, '127.0.0.1')
    connections.push(redis)
    return redis
  }
  return {
    get server() {
      return ready().server
    },
    get admin() {
      return ready().admin
    },
    client(options = {}) {
      const c = createLockClient(ready().server.url, options)
      clients.push(c)
      return c
    },
    connection,
    backend(client = connection()) {
      const backend = redisBackend({ client })
      backends.push(backend)
      return backend
    },
  }
}
