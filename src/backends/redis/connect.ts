/**
 * From a URL to an ioredis client: the one place that turns a fencelock URL into ioredis options, for
 * redis:// and rediss:// (one server, or the seed of a Cluster) and for each node of redlock://.
 */
import type { Cluster, Redis, RedisOptions } from 'ioredis'
import { BackendUnavailableError } from '../../core/errors.js'
import { redact } from '../../core/url.js'

/** The client methods we use: any ioredis `Redis` or `Cluster` has them. */
export type RedisClient = Redis | Cluster

/** What we take from the ioredis module (as `loadDriver` hands it over): its two client classes. */
export interface IORedis {
  readonly Redis: typeof Redis
  readonly Cluster: typeof Cluster
}

/**
 * The ioredis options we set. ioredis 6 adds `replyMapping` (`| undefined`) to RedisOptions but its
 * constructors take it without `undefined`: under exactOptionalPropertyTypes a whole RedisOptions fits
 * none of them. fencelock never sets it (replies keep the RESP2 shapes the scripts expect).
 */
export type ClientOptions = Omit<RedisOptions, 'replyMapping'>

export interface ConnectOptions {
  /** Which server of the URL, as "host:port" (Redlock: one of `hostsOf(url)`). @default the URL's host */
  readonly node?: string | undefined
  /** The server is a seed of a Redis Cluster (which finds the other nodes itself). @default false */
  readonly cluster?: boolean | undefined
  /** ioredis options this use adds (Redlock: `enableOfflineQueue: false`, …); they win over the defaults. */
  readonly extra?: ClientOptions | undefined
}

/** A client made from a URL, for the caller to own (and `disconnect()`). */
export interface RedisConnection {
  readonly client: RedisClient
  /**
   * Present when the URL names a database other than 0: settles once the client works in it, and rejects
   * (not retryably) when the server cannot select it. Every command must wait for it.
   */
  readonly ready?: Promise<unknown>
}

/**
 * Opens an ioredis client for `url` (credentials, TLS for rediss:, the database in its path) with the
 * failure policy fencelock relies on. Connection errors are left to the commands that fail.
 * @throws {TypeError} when the path is not a database number
 * @example
 * const { client, ready } = connect(await import('ioredis'), new URL('redis://127.0.0.1:6379/2'))
 */
export function connect(ioredis: IORedis, url: URL, options: ConnectOptions = {}): RedisConnection {
  const db = databaseOf(url)
  const { host, port } = addressOf(options.node === undefined ? url : new URL(`redis://${options.node}`))
  const common: ClientOptions = { ...serverOptions(url), ...options.extra }
  const client: RedisClient = options.cluster
    ? new ioredis.Cluster([{ host, port }], { redisOptions: common })
    : new ioredis.Redis({ ...common, host, port, db })
  // Connection errors surface on the commands that fail; ioredis also emits them here, where nobody listens.
  client.on('error', () => {})
  return db === 0 ? { client } : { client, ready: selected(client, db, url) }
}

/** What every server of a URL shares: credentials, TLS, and how a command fails while disconnected. */
function serverOptions(url: URL): ClientOptions {
  return {
    // Fail a command after one reconnect attempt instead of queueing it forever: the core decides
    // whether to retry, and a waiting acquire must see "unavailable", not hang.
    maxRetriesPerRequest: 1,
    connectTimeout: 5000,
    // disconnect() ends the socket and destroys it only after this (default 2 s), keeping the process
    // alive that long when the server never answered: a CLI that gave up must exit on time.
    disconnectTimeout: 100,
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
  }
}

/** Host and port of a server URL ("[::1]" without its brackets); 127.0.0.1:6379 where they are left out. */
function addressOf(server: URL): { host: string; port: number } {
  return {
    host: server.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
    port: server.port === '' ? 6379 : Number(server.port),
  }
}

/** The database number in the URL's path (`/2`); 0 without one. */
function databaseOf(url: URL): number {
  const dbText = url.pathname.replace(/^\//, '')
  if (dbText !== '' && !/^\d+$/.test(dbText)) {
    throw new TypeError(`Expected a database number after the port in ${redact(url)}, got "/${dbText}"`)
  }
  return dbText === '' ? 0 : Number(dbText)
}

/**
 * ioredis reports a failed SELECT as an event and goes on in database 0: locks would silently land in
 * the wrong database. Select it ourselves first, and fail every operation (not retryably) if it fails.
 */
function selected(client: RedisClient, db: number, url: URL): Promise<unknown> {
  const ready = (client as Redis).select(db).catch((cause: unknown) => {
    throw new BackendUnavailableError(
      `Redis database ${db} in ${redact(url)} cannot be selected (${(cause as Error).message}); the server has ` +
        'fewer databases (see its `databases` setting)',
      { backend: redact(url), cause, retryable: false },
    )
  })
  ready.catch(() => {})
  return ready
}
