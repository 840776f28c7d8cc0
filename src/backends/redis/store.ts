/**
 * One Redis (or Cluster) as every primitive of the backend speaks to it: the prefix of its keys, the
 * scripts run by their SHA (the commands of one turn of the event loop in one socket write), the servers
 * a listing scans, and a failure told in plain words (what failed on the way to the server, not
 * ioredis's bookkeeping).
 */
import type { Cluster, Redis } from 'ioredis'
import {
  BackendUnavailableError,
  causeText,
  describeNetworkError,
  LockError,
  quoteKey,
} from '../../core/errors.js'
import type { RedisClient } from './connect.js'
import type { Script } from './lua.js'

export const isReplyError = (error: unknown): error is Error =>
  error instanceof Error && error.name === 'ReplyError'

export function isCluster(client: RedisClient): client is Cluster {
  return (client as Cluster).isCluster === true
}

export interface RedisStoreOptions {
  readonly prefix: string
  /** Names the store in errors. */
  readonly id: string
  /** A check every command waits for (the URL's database is selected). */
  readonly ready?: Promise<unknown> | undefined
  /** The clients this backend created: their connection errors explain the failures of commands. */
  readonly owned: readonly RedisClient[]
}

export class RedisStore {
  readonly client: RedisClient
  readonly id: string
  readonly #prefix: string
  #ready: Promise<unknown> | undefined
  /** host:port, for messages. */
  readonly #address: string
  /**
   * The latest connection error of a client this backend created (a user's own client keeps its own
   * 'error' listeners: adding one would silence ioredis's warnings for them). A command that times out while
   * ioredis reconnects says nothing of why; this does.
   */
  #lastConnectionError: unknown

  /** The prefix of every key of this store (doctor counts the locks under it). */
  get prefix(): string {
    return this.#prefix
  }

  constructor(client: RedisClient, options: RedisStoreOptions) {
    this.client = client
    this.id = options.id
    this.#prefix = options.prefix
    this.#ready = options.ready
    // Once the database is selected, commands go out at once: the SELECT is ahead of them on the connection.
    options.ready?.then(
      () => {
        this.#ready = undefined
      },
      () => {},
    )
    this.#address = describeAddress(client)
    for (const c of options.owned) {
      const failed = (error: unknown) => {
        // ioredis also emits its own bookkeeping (a command out of retries): not why the connection failed.
        if ((error as Error)?.name !== 'MaxRetriesPerRequestError') this.#lastConnectionError = error
      }
      c.on('error', failed)
      c.on('ready', () => {
        this.#lastConnectionError = undefined
      })
    }
  }

  /** Scripts sent in the current turn of the event loop (see `#coalesce`). */
  #sentThisTurn = 0
  /** The socket corked in this turn, uncorked at its end. */
  #corked: { uncork(): void } | undefined
  readonly #endTurn = () => {
    this.#sentThisTurn = 0
    const corked = this.#corked
    this.#corked = undefined
    corked?.uncork()
  }

  /**
   * ioredis writes each command to the socket at once: a system call each, most of a client's CPU when it
   * has many operations under way (256 acquires, or a renewal batch of many EXTEND_MANY groups). From the
   * second script of one turn on, the socket is corked, and uncorked once the turn's callbacks and
   * promise reactions have run: the turn's commands leave in one write, in the order they were sent. A
   * lone command is written at once, as before. A Cluster spreads its commands over one socket per
   * node, and is left as it is.
   */
  #coalesce(): void {
    if (this.#sentThisTurn++ === 0) {
      process.nextTick(this.#endTurn)
      return
    }
    if (this.#corked !== undefined || isCluster(this.client)) return
    const socket = this.client.stream
    if (socket?.writable) {
      socket.cork()
      this.#corked = socket
    }
  }

  /**
   * Runs a script by its SHA; on NOSCRIPT (a restart, SCRIPT FLUSH, a failover) sends the source once. The
   * source goes out a round trip late, after whatever was sent meanwhile; an acquire whose `signal` has
   * aborted by then is not re-sent (it would grant a lock nobody waits for, after its clean-up).
   */
  run(s: Script, keys: string[], args: Array<string | number>, signal?: AbortSignal): Promise<unknown> {
    // Not `async`: with the database selected (or the default one), a script goes out in this turn, and
    // its reply takes one promise to the caller, not three.
    if (this.#ready) return this.#ready.then(() => this.#send(s, keys, args, signal))
    return this.#send(s, keys, args, signal)
  }

  #send(s: Script, keys: string[], args: Array<string | number>, signal?: AbortSignal): Promise<unknown> {
    try {
      this.#coalesce()
      return this.client.evalsha(s.sha, keys.length, ...keys, ...args).catch((error: unknown) => {
        if (!isReplyError(error) || !error.message.startsWith('NOSCRIPT')) throw error
        if (signal?.aborted) throw signal.reason
        this.#coalesce()
        return this.client.eval(s.source, keys.length, ...keys, ...args)
      })
    } catch (error) {
      return Promise.reject(error)
    }
  }

  /**
   * The servers a listing must SCAN: every master of a Cluster (a key lives on one of them), or the one
   * server. A Cluster client learns its masters once connected: one PING waits for that.
   */
  async servers(): Promise<Redis[]> {
    if (this.#ready) await this.#ready
    const client = this.client
    if (!isCluster(client)) return [client]
    if (client.status !== 'ready') await client.ping()
    return client.nodes('master')
  }

  /** `WAIT` on the connection that wrote the lock: how many replicas acknowledged, within `timeoutMs`. */
  async replicasAcknowledging(count: number, timeoutMs: number): Promise<number> {
    return (await (this.client as Redis).call('WAIT', count, timeoutMs)) as number
  }

  /**
   * The error to throw for a failed `what` ("acquire", "release", …) of `key`, whose key names `names`
   * (the primitive's, as its layout gives them) a conflict with another program's data names.
   */
  explain(key: string, what: string, error: unknown, names: readonly string[]): LockError {
    if (error instanceof LockError) return error
    const message = (error as Error)?.message ?? String(error)
    if (isReplyError(error) && /WRONGTYPE|not an integer/.test(message)) {
      return new LockError(
        'FENCELOCK_KEY_CONFLICT',
        `Redis key ${names.join(' or ')} on ${this.id} holds data that is not a fencelock lock (${message}). ` +
          'Another program uses these names: pick another `prefix`, or remove the keys',
        { key, backend: this.id, cause: error },
      )
    }
    // A wrong password, or a server that is not Redis at all, stays so until someone changes the URL.
    const notRedisServer = this.#notRedis(error)
    const retryable =
      notRedisServer === undefined &&
      !(isReplyError(error) && /NOAUTH|WRONGPASS|NOPERM|DB index/i.test(message))
    return new BackendUnavailableError(
      `Could not ${what} lock ${quoteKey(key)} on ${this.id}: ${notRedisServer ?? this.#plain(error)}`,
      {
        key,
        backend: this.id,
        cause: error,
        retryable,
      },
    )
  }

  /**
   * In plain words: what failed on the way to the server, rather than ioredis's retry bookkeeping
   * ("Reached the max retries per request limit…") or a bare timeout while it reconnects.
   */
  #plain(error: unknown): string {
    const client = this.client
    const address = this.#address
    const last = nodeError(this.#lastConnectionError)
    const down = client.status !== 'ready'
    const tls = !isCluster(client) && client.options.tls !== undefined
    error = nodeError(error)
    return (
      describeNetworkError(error, address) ??
      (down ? describeNetworkError(last, address) : undefined) ??
      (down && tls && last === undefined
        ? `the TLS handshake with ${address} did not complete (${causeText(error)}): check that the server ` +
          'speaks TLS, or use redis:// for a plain one'
        : undefined) ??
      (down ? `${address} is unreachable (${causeText(last ?? error)})` : causeText(error))
    )
  }

  /** "… is not a Redis server …" when the failure, or the connection's latest one, says so. */
  #notRedis(error: unknown): string | undefined {
    const down = this.client.status !== 'ready'
    return (
      notRedis(nodeError(error), this.#address) ??
      (down ? notRedis(nodeError(this.#lastConnectionError), this.#address) : undefined)
    )
  }
}

/** A Cluster's "Failed to refresh slots cache." names no reason: the last node's error does. */
function nodeError(error: unknown): unknown {
  return (error as { lastNodeError?: unknown } | undefined)?.lastNodeError ?? error
}

/**
 * "is not a Redis server" when the server's first bytes were not a reply ioredis can parse (an HTTP or a
 * TLS port, another protocol): its parser calls that a protocol error and asks to "report this", which
 * helps nobody. Shows what the server answered, printable, and says what to check.
 */
function notRedis(error: unknown, address: string): string | undefined {
  const e = error as { name?: unknown; message?: unknown; buffer?: unknown } | undefined
  if (e?.name !== 'ParserError' && !/as reply type byte|Unknown RESP type/.test(String(e?.message ?? ''))) {
    return undefined
  }
  const bytes = received(e?.buffer).subarray(0, 200).toString('latin1')
  const line = bytes
    .split(/\r?\n/)[0]!
    .replace(/[^\x20-\x7e]/g, '?')
    .slice(0, 40)
  const http = line.startsWith('HTTP/') ? ' (an HTTP server)' : ''
  return (
    `${address} is not a Redis server: it answered ${line === '' ? 'something else' : JSON.stringify(line)}${http}. ` +
    'Check the host and port in the URL: they must name a Redis server'
  )
}

/** The bytes a parser error carries: a Buffer, or (redis-parser) the Buffer as JSON. */
function received(buffer: unknown): Buffer {
  if (Buffer.isBuffer(buffer)) return buffer
  try {
    const parsed = typeof buffer === 'string' ? (JSON.parse(buffer) as { data?: unknown }) : undefined
    return Array.isArray(parsed?.data) ? Buffer.from(parsed.data as number[]) : Buffer.alloc(0)
  } catch {
    return Buffer.alloc(0)
  }
}

/** host:port of a client, for messages. */
function describeAddress(client: RedisClient): string {
  if (isCluster(client)) return describeClient(client).replace(/^redis:\/\/|\?cluster=true$/g, '')
  return `${client.options.host ?? '127.0.0.1'}:${client.options.port ?? 6379}`
}

/** A client as a URL without secrets: the store's id when the user names none. */
export function describeClient(client: RedisClient): string {
  if (isCluster(client)) {
    const seeds = (client as unknown as { startupNodes?: unknown[] }).startupNodes
    const seed = seeds?.[0] as { host?: string; port?: number } | string | undefined
    const address = typeof seed === 'string' ? seed : `${seed?.host ?? '127.0.0.1'}:${seed?.port ?? 6379}`
    return `redis://${address}?cluster=true`
  }
  const o = client.options
  const scheme = o.tls ? 'rediss' : 'redis'
  return `${scheme}://${o.host ?? '127.0.0.1'}:${o.port ?? 6379}${o.db ? `/${o.db}` : ''}`
}
