/**
 * Every store that has a server, when that server cannot serve: (a) stopped (a free loopback port nobody
 * listens on), (b) accepting connections but never answering (a socket of ours), (c) not speaking the
 * protocol (an HTTP server answering everything with 200 and a page of HTML; for the HTTP stores S3, GCS
 * and DynamoDB that is a web server at the endpoint, not theirs). Each case measures
 * `acquire({ timeout: '1s' })`, `tryAcquire` and `close()`: the first two must end as docs/api.md promises
 * (within max(timeout, 1 s) + 0.5 s) with a `BackendUnavailableError` that names the server, and `close()`
 * within its ~3 s. The assertions leave room for a loaded machine; each case prints what it measured.
 *
 * memory and file have no server to lose: memory lives in this process, and a file lock's folder is a
 * local file system (a dead NFS mount, whose calls hang in the kernel, is out of scope).
 */
import assert from 'node:assert/strict'
import { createServer as createHttpServer } from 'node:http'
import { createServer, type Server, type Socket } from 'node:net'
import { after, describe, it } from 'node:test'
import { BackendUnavailableError, createLockClient } from '../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../src/schemes.js'
import { freePorts } from '../servers/ports.js'

/** The bounds of docs/api.md: an acquire or tryAcquire ends within max(timeout, 1 s) + 0.5 s; close() in ~3 s. */
const SETTLE_MS = 1500
const CLOSE_MS = 3500
/** Room for a loaded 2-core machine on top of them. */
const LOAD_MS = 2500

// The AWS SDK wants credentials to sign with; nothing checks them here.
process.env.AWS_ACCESS_KEY_ID ??= 'fencelock'
process.env.AWS_SECRET_ACCESS_KEY ??= 'fencelock'

const at = (port: number) => `127.0.0.1:${port}`

/** Each backend's URL for its servers' ports (Redlock takes three). */
const BACKENDS: ReadonlyArray<{
  name: string
  servers: number
  url: (ports: number[]) => string
  http?: true
}> = [
  { name: 'redis', servers: 1, url: ([p]) => `redis://${at(p!)}` },
  { name: 'redis cluster', servers: 1, url: ([p]) => `redis://${at(p!)}?cluster=true` },
  { name: 'redlock', servers: 3, url: (ps) => `redlock://${ps.map(at).join(',')}` },
  { name: 'etcd', servers: 1, url: ([p]) => `etcd://${at(p!)}` },
  { name: 'zookeeper', servers: 1, url: ([p]) => `zookeeper://${at(p!)}/locks` },
  { name: 'postgres', servers: 1, url: ([p]) => `postgres://postgres@${at(p!)}/postgres` },
  { name: 'mysql', servers: 1, url: ([p]) => `mysql://root@${at(p!)}/fencelock` },
  {
    name: 's3',
    servers: 1,
    http: true,
    url: ([p]) => `s3://fencelock/?endpoint=http://${at(p!)}&forcePathStyle=true&region=us-east-1`,
  },
  {
    name: 'gcs',
    servers: 1,
    http: true,
    url: ([p]) => `gs://fencelock/?endpoint=http://${at(p!)}&project=fencelock`,
  },
  {
    name: 'dynamodb',
    servers: 1,
    http: true,
    url: ([p]) => `dynamodb://fencelock?endpoint=http://${at(p!)}&region=us-east-1`,
  },
]

type Mode = 'stopped' | 'silent' | 'not the protocol'

/** A server of the test's own, and every connection it accepted (closed with it). */
interface Listener {
  readonly port: number
  close(): void
}

async function listen(server: Server): Promise<Listener> {
  const sockets = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', resolve)
  })
  const address = server.address()
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    close() {
      for (const socket of sockets) socket.destroy()
      server.close()
    },
  }
}

/** `count` servers of the kind `mode` asks for (none for a stopped one: free ports). */
async function serversFor(mode: Mode, count: number): Promise<{ ports: number[]; close(): void }> {
  if (mode === 'stopped') return { ports: await freePorts(count), close() {} }
  const listeners: Listener[] = []
  for (let i = 0; i < count; i++) {
    listeners.push(
      await listen(
        mode === 'silent'
          ? createServer()
          : createHttpServer((_req, res) => {
              res.writeHead(200, { 'content-type': 'text/html' })
              res.end('<html><body>It works!</body></html>')
            }),
      ),
    )
  }
  return {
    ports: listeners.map((l) => l.port),
    close: () => {
      for (const l of listeners) l.close()
    },
  }
}

/** Runs `call`, which must reject; resolves with the error and how long it took. */
async function timed(call: () => Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const started = performance.now()
  const error = await call().then(
    () => new Error('it succeeded'),
    (e: unknown) => e,
  )
  return { error, ms: performance.now() - started }
}

function assertUnavailable(error: unknown, ports: number[], what: string): void {
  assert.ok(
    error instanceof BackendUnavailableError,
    `${what}: expected BackendUnavailableError, got ${error}`,
  )
  assert.ok(error.message.includes(at(ports[0]!)), `${what}: the message names no server: ${error.message}`)
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`

describe('a store that cannot serve: timeouts and close() hold', { timeout: 600_000 }, () => {
  const measured: string[] = []
  after(() => {
    // The figures, for docs/api.md and for a reader of the test log.
    process.stdout.write(
      `# acquire(1s) / tryAcquire / close, per backend and case:\n${measured.join('\n')}\n`,
    )
  })

  it('memory and file have no server to lose', { skip: 'in-process, and a local file system' }, () => {})

  for (const backend of BACKENDS) {
    for (const mode of ['stopped', 'silent', 'not the protocol'] as const) {
      it(`${backend.name}, ${mode}`, async (t) => {
        const servers = await serversFor(mode, backend.servers)
        try {
          // Loaded first: a driver's first import is not the store's time.
          const store = await loadBackend(parseBackendUrl(backend.url(servers.ports)))
          const client = createLockClient(store, { ttl: '10s' })
          const acquire = await timed(() => client.acquire('k', { timeout: '1s' }))
          const attempt = await timed(() => client.tryAcquire('t'))
          const closing = performance.now()
          await client.close()
          const closeMs = performance.now() - closing
          const line = `${backend.name}, ${mode}: ${seconds(acquire.ms)} / ${seconds(attempt.ms)} / ${seconds(closeMs)}`
          measured.push(line)
          t.diagnostic(`${line}; ${(acquire.error as Error)?.message}`)

          assertUnavailable(acquire.error, servers.ports, 'acquire')
          assertUnavailable(attempt.error, servers.ports, 'tryAcquire')
          assert.ok(
            acquire.ms < SETTLE_MS + LOAD_MS,
            `acquire({ timeout: '1s' }) took ${seconds(acquire.ms)}`,
          )
          assert.ok(attempt.ms < SETTLE_MS + LOAD_MS, `tryAcquire took ${seconds(attempt.ms)}`)
          assert.ok(closeMs < CLOSE_MS + LOAD_MS, `close() took ${seconds(closeMs)}`)
          if (backend.name === 'redis' && mode === 'not the protocol') {
            assert.match((acquire.error as Error).message, /is not a Redis server: it answered "HTTP\/1\.1 /)
          }
        } finally {
          servers.close()
        }
      })
    }
  }
})
