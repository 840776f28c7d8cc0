/**
 * The HTTP shell shared by the S3 and GCS test servers (`s3.ts`, `gcs.ts`): a node:http server on
 * 127.0.0.1, port 0, that reads each request's whole body, applies the fault switches, and hands the
 * request to a dialect whose commit is ONE synchronous call. No `await` sits between a dialect's
 * precondition check and its write, so the first request to reach its commit wins and every later one
 * sees the new state: exactly-one-winner races hold however many writers run at once.
 *
 * A dialect sees a request twice: `arrive` as soon as its headers are in (it may note the key's state, e.g.
 * S3's delete counter for 409 ConditionalRequestConflict), then the returned `commit` with the whole body,
 * after any injected delay. Faults (per server, optionally matched by method and path):
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

/** One wire dialect (S3 or GCS) over its own durable state. */
export interface Dialect {
  /** Called when the headers are in; the commit runs after the body and any delay. */
  arrive(request: FakeRequest): Commit
  /** The error reply this dialect gives for an injected failure with `status`. */
  faultReply(status: number, request: FakeRequest): FakeReply
  /** Whether preconditions are ignored (lax mode, like s3rver). */
  lax: boolean
}

/** Which requests a fault applies to; an absent field matches everything. */
export interface FaultMatch {
  /** HTTP method, upper case. */
  readonly method?: string
  /** The raw (percent-encoded) path: a string matches exactly, a RegExp by `test`. */
  readonly path?: string | RegExp
}

/** The statuses `failNext` can inject. */
export type InjectedStatus = 409 | 429 | 500 | 503

/** One request the server answered (or dropped), in the order the answers happened. */
export interface LoggedRequest {
  readonly method: string
  /** The raw (percent-encoded) path. */
  readonly path: string
  /** The query string without its `?` ('' when none). */
  readonly query: string
  /** The status sent, or the status the dropped response would have had. */
  readonly status: number
  /** How a fault changed it: 'failed' (injected status, nothing committed), 'dropped' (committed, no reply). */
  readonly fault?: 'failed' | 'dropped'
}

/** The fault switches and the request log, the same on both servers. */
export interface FakeControls {
  /**
   * Delays every matching request by `ms` between its arrival and its commit (the first matching rule
   * counts); `delay(0)` removes every delay rule.
   */
  delay(ms: number, match?: FaultMatch): void
  /**
   * Holds every matching request between its arrival and its commit until the returned release is called
   * (an ordering tool without timing: a test lets a request commit exactly when it wants).
   */
  hold(match?: FaultMatch): () => void
  /** The next `count` matching requests fail with `status` and the dialect's error body. */
  failNext(count: number, status: InjectedStatus, match?: FaultMatch): void
  /** The next `count` matching requests commit, then lose their response (the socket is destroyed). */
  dropResponseAfterCommit(count: number, match?: FaultMatch): void
  /** Ignores every precondition while on (like s3rver), so `doctor` has something to catch. */
  lax(on: boolean): void
  /** How many requests have arrived and not reached their commit yet (e.g. held by a delay). */
  readonly inFlight: number
  /** Every request answered so far, oldest first. */
  readonly requests: readonly LoggedRequest[]
  /** Empties the request log. */
  clearLog(): void
  /** Removes every pending fault (delays, holds, failures, drops) and turns lax mode off. */
  clearFaults(): void
}

/** A listening fake: its address and its life cycle. */
export interface FakeServer extends FakeControls {
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
}

interface CountedFault {
  remaining: number
  readonly match?: FaultMatch | undefined
}

interface FailFault extends CountedFault {
  readonly status: InjectedStatus
}

interface DelayFault {
  readonly ms: number
  readonly match?: FaultMatch | undefined
}

interface Hold {
  readonly match?: FaultMatch | undefined
  readonly released: Promise<void>
}

const matches = (match: FaultMatch | undefined, request: FakeRequest): boolean =>
  !match ||
  ((match.method === undefined || match.method === request.method) &&
    (match.path === undefined ||
      (typeof match.path === 'string' ? match.path === request.path : match.path.test(request.path))))

/** Takes one use of the first matching counted fault, if any. */
function takeFault<F extends CountedFault>(faults: F[], request: FakeRequest): F | undefined {
  const fault = faults.find((f) => f.remaining > 0 && matches(f.match, request))
  if (fault) fault.remaining -= 1
  return fault
}

/** The pending faults of one server and its request log. */
class Faults {
  readonly failures: FailFault[] = []
  readonly drops: CountedFault[] = []
  delays: DelayFault[] = []
  holds: Hold[] = []
  /** The release of every hold still on, so `clear()` can let their requests go. */
  readonly releases: (() => void)[] = []
  readonly log: LoggedRequest[] = []
  inFlight = 0

  delayFor(request: FakeRequest): number {
    return this.delays.find((d) => matches(d.match, request))?.ms ?? 0
  }

  /** Resolves when every hold matching `request` is released. */
  async holdsFor(request: FakeRequest): Promise<void> {
    await Promise.all(this.holds.filter((h) => matches(h.match, request)).map((h) => h.released))
  }

  hold(match: FaultMatch | undefined): () => void {
    let release = () => {}
    const released = new Promise<void>((resolve) => {
      release = resolve
    })
    const hold = { match, released }
    this.holds.push(hold)
    const end = () => {
      this.holds = this.holds.filter((h) => h !== hold)
      release()
    }
    this.releases.push(end)
    return end
  }

  clear(): void {
    this.failures.length = 0
    this.drops.length = 0
    this.delays = []
    for (const release of this.releases.splice(0)) release()
  }
}

function readBody(request: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => resolve(Buffer.concat(chunks)))
    request.on('error', reject)
  })
}

function send(request: FakeRequest, response: ServerResponse, reply: FakeReply): void {
  const body = reply.body === undefined ? Buffer.alloc(0) : Buffer.from(reply.body)
  response.writeHead(reply.status, { ...reply.headers, 'content-length': String(body.length) })
  response.end(request.method === 'HEAD' ? undefined : body)
}

async function serve(dialect: Dialect, faults: Faults, message: IncomingMessage, response: ServerResponse) {
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
  const failure = takeFault(faults.failures, request)
  if (failure) {
    faults.log.push({ ...entry, status: failure.status, fault: 'failed' })
    return send(request, response, dialect.faultReply(failure.status, request))
  }
  // The atomic step: the dialect checks and writes in this one synchronous call.
  const reply = commit(body)
  if (takeFault(faults.drops, request)) {
    faults.log.push({ ...entry, status: reply.status, fault: 'dropped' })
    message.socket.destroy()
    return
  }
  faults.log.push({ ...entry, status: reply.status })
  send(request, response, reply)
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
export async function startHttpFake(dialect: Dialect): Promise<FakeServer> {
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
