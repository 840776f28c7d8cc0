/**
 * The HTTP shell shared by the S3 and GCS test servers (`s3.ts`, `gcs.ts`): a node:http server on
 * 127.0.0.1, port 0, that reads each request's whole body, applies the fault switches, and hands the
 * request to a dialect whose commit is ONE synchronous call. No `await` sits between a dialect's
 * precondition check and its write, so the first request to reach its commit wins and every later one
 * sees the new state: exactly-one-winner races hold however many writers run at once.
 *
 * A dialect sees a request twice: `arrive` as soon as its headers are in (it may note the key's state, e.g.
 * S3's delete counter for 409 ConditionalRequestConflict), then the returned `commit` with the whole body,
 * after any injected delay. Faults (per server, optionally matched by method and path; fake-faults.ts):
 * - `delay(ms)`: every matching request waits that long between arrival and commit (widens race windows);
 * - `hold()`: matching requests wait between arrival and commit until the test releases them (ordering
 *   without timing);
 * - `failNext(n, status)`: the next n matching requests get the dialect's error body for that status
 *   (409, 429, 500, 503) and change nothing;
 * - `dropResponseAfterCommit(n)`: the next n matching requests commit, then their socket is destroyed
 *   before any response byte: the ambiguous case the SDKs retry;
 * - `lax(true)`: the dialect ignores every precondition (what s3rver does), for `doctor` to catch.
 * The state lives in the dialect, not the listener: `stop()`/`start()`/`restart()` keep it (the cloud is
 * durable), and `start()` listens on the same port again.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { sleep } from '../support/time.js'
import { type FakeControls, Faults } from './fake-faults.js'

export type { FakeControls, FaultMatch, InjectedStatus, LoggedRequest } from './fake-faults.js'

/** A request as the dialect sees it: the raw path (still percent-encoded), the query, the headers. */
export interface FakeRequest {
  readonly method: string
  readonly path: string
  readonly query: URLSearchParams
  readonly headers: IncomingMessage['headers']
}

/** What a dialect answers; `body` is omitted on HEAD by the shell. */
export interface FakeReply {
  readonly status: number
  readonly headers?: Record<string, string>
  readonly body?: Buffer | string
}

/** Commits a request with its whole body, synchronously (the atomic step), and says what to answer. */
export type Commit = (body: Buffer) => FakeReply

/** One wire dialect (S3 or GCS) over its own durable buckets. */
export interface Dialect<Settings, Stored> {
  /** Called when the headers are in; the commit runs after the body and any delay. */
  arrive(request: FakeRequest): Commit
  /** The error reply this dialect gives for an injected failure with `status`. */
  faultReply(status: number, request: FakeRequest): FakeReply
  /** Whether preconditions are ignored (lax mode, like s3rver). */
  lax: boolean
  /** The dialect's open behaviours, mutable while it runs. */
  readonly settings: Settings
  /** Creates a bucket; an existing one is kept as is. */
  createBucket(name: string): void
  /** The live object, or undefined. */
  peek(bucket: string, key: string): Stored | undefined
}

/** What both dialects share: lax mode, the settings, and the buckets by name, each with its objects. */
export abstract class BucketDialect<
  Settings,
  Stored,
  Bucket extends { readonly objects: Map<string, Stored> },
> implements Dialect<Settings, Stored>
{
  lax = false
  readonly buckets = new Map<string, Bucket>()

  constructor(
    readonly settings: Settings,
    private readonly newBucket: (name: string) => Bucket,
  ) {}

  abstract arrive(request: FakeRequest): Commit
  abstract faultReply(status: number, request: FakeRequest): FakeReply

  createBucket(name: string): void {
    if (!this.buckets.has(name)) this.buckets.set(name, this.newBucket(name))
  }

  peek(bucket: string, key: string): Stored | undefined {
    return this.buckets.get(bucket)?.objects.get(key)
  }
}

/** The value of a request header, several values joined with commas. */
export function headerOf(request: FakeRequest, name: string): string | undefined {
  const value = request.headers[name]
  return Array.isArray(value) ? value.join(',') : value
}

/** A listening fake: its address, its life cycle, and direct access to its buckets for tests. */
export interface FakeServer<Settings, Stored> extends FakeControls {
  /** The port, the same across `restart()`. */
  readonly port: number
  /** `http://127.0.0.1:<port>`. */
  readonly endpoint: string
  /** Stops listening and drops open connections; the state is kept. */
  stop(): Promise<void>
  /** Listens again on the same port. */
  start(): Promise<void>
  /** `stop()` then `start()`: a cloud outage that loses no data. */
  restart(): Promise<void>
  /** Stops for good. */
  close(): Promise<void>
  /** The behaviours the cloud's docs leave open; mutable while it runs, so one test can try each. */
  readonly settings: Settings
  /** Creates a bucket (as the SDK's CreateBucket would); an existing one is kept as is. */
  createBucket(name: string): void
  /** The live object, or undefined: for a test's assertions, bypassing HTTP and faults. */
  peek(bucket: string, key: string): Stored | undefined
}

function readBody(request: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => resolve(Buffer.concat(chunks)))
    request.on('error', reject)
    // A connection cut before the body's end (a client gave up, or `stop()`): nothing is committed.
    request.on('close', () => {
      if (!request.complete) reject(new Error('the request was cut before its body ended'))
    })
  })
}

function send(request: FakeRequest, response: ServerResponse, reply: FakeReply, withoutDate = false): void {
  const body = reply.body === undefined ? Buffer.alloc(0) : Buffer.from(reply.body)
  // node:http adds `Date` (the server's clock, which fences lean on) unless told not to.
  response.sendDate = !withoutDate
  response.writeHead(reply.status, { ...reply.headers, 'content-length': String(body.length) })
  response.end(request.method === 'HEAD' ? undefined : body)
}

async function serve(
  dialect: Dialect<unknown, unknown>,
  faults: Faults,
  message: IncomingMessage,
  response: ServerResponse,
) {
  const url = new URL(message.url ?? '/', 'http://127.0.0.1')
  const request: FakeRequest = {
    method: message.method ?? 'GET',
    path: url.pathname,
    query: url.searchParams,
    headers: message.headers,
  }
  const commit = dialect.arrive(request)
  faults.inFlight += 1
  let body: Buffer
  try {
    body = await readBody(message)
    const ms = faults.delayFor(request)
    if (ms > 0) await sleep(ms)
    await faults.holdsFor(request)
  } finally {
    faults.inFlight -= 1
  }
  const entry = { method: request.method, path: request.path, query: url.search.slice(1) }
  const failure = faults.takeFailure(request)
  if (failure) {
    faults.log.push({ ...entry, status: failure.status, fault: 'failed' })
    return send(request, response, dialect.faultReply(failure.status, request), faults.withoutDate)
  }
  // The atomic step: the dialect checks and writes in this one synchronous call.
  const reply = commit(body)
  if (faults.takeDrop(request)) {
    faults.log.push({ ...entry, status: reply.status, fault: 'dropped' })
    message.socket.destroy()
    return
  }
  faults.log.push({ ...entry, status: reply.status })
  send(request, response, reply, faults.withoutDate)
}

function listen(server: Server, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject)
      const address = server.address()
      resolve(typeof address === 'object' && address ? address.port : 0)
    })
  })
}

/** How often `start()` tries its old port again while another socket holds it. */
const RELISTEN_ATTEMPTS = 50

/** Starts a fake for `dialect` on 127.0.0.1 (a fresh port). */
export async function startHttpFake<Settings, Stored>(
  dialect: Dialect<Settings, Stored>,
): Promise<FakeServer<Settings, Stored>> {
  const faults = new Faults()
  const makeServer = () =>
    createServer((message, response) => {
      serve(dialect, faults, message, response).catch((error: unknown) => {
        if (!response.headersSent) send({ method: 'GET' } as FakeRequest, response, internalError(error))
        else response.destroy()
      })
    })
  let server: Server | undefined = makeServer()
  const port = await listen(server, 0)
  const stop = async () => {
    const closing = server
    server = undefined
    if (!closing) return
    await new Promise<void>((resolve) => {
      closing.close(() => resolve())
      closing.closeAllConnections()
    })
  }
  const start = async () => {
    if (server) return
    const next = makeServer()
    for (let attempt = 1; !server; attempt++) {
      try {
        await listen(next, port)
        server = next
      } catch (error) {
        // The old port can be briefly taken by another process's outgoing connection: wait and retry.
        if (attempt >= RELISTEN_ATTEMPTS || (error as NodeJS.ErrnoException).code !== 'EADDRINUSE')
          throw error
        await sleep(20)
      }
    }
  }
  return {
    port,
    endpoint: `http://127.0.0.1:${port}`,
    stop,
    start,
    restart: async () => {
      await stop()
      await start()
    },
    close: stop,
    delay: (ms, match) => {
      if (ms > 0) faults.delays.push({ ms, match })
      else faults.delays = []
    },
    hold: (match) => faults.hold(match),
    failNext: (count, status, match) => void faults.failures.push({ remaining: count, status, match }),
    dropResponseAfterCommit: (count, match) => void faults.drops.push({ remaining: count, match }),
    lax: (on) => {
      dialect.lax = on
    },
    withoutDate: (on) => {
      faults.withoutDate = on
    },
    get requests() {
      return faults.log
    },
    get inFlight() {
      return faults.inFlight
    },
    clearLog: () => {
      faults.log.length = 0
    },
    clearFaults: () => {
      faults.clear()
      dialect.lax = false
    },
    settings: dialect.settings,
    createBucket: (name) => dialect.createBucket(name),
    peek: (bucket, key) => dialect.peek(bucket, key),
  }
}

function internalError(error: unknown): FakeReply {
  return { status: 500, headers: { 'content-type': 'text/plain' }, body: `fake server bug: ${String(error)}` }
}

/** Base64 of a big-endian unsigned 32-bit value, the wire form of both CRC headers. */
export function crcBase64(value: number): string {
  const bytes = Buffer.alloc(4)
  bytes.writeUInt32BE(value >>> 0)
  return bytes.toString('base64')
}
