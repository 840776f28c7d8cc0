/**
 * redis://host:port[/db] and rediss:// (TLS) — one Redis primary, or a Redis Cluster (`?cluster=true`).
 *
 * Storage (see scripts.ts): `<prefix>{<key>}` = owner id with the lease as PX expiry, and
 * `<prefix>{<key>}:fence` = a counter INCR'd by the acquiring script. The counter never expires: one
 * small key per distinct lock name (about 60–100 bytes with its key name) stays for good, so fences keep
 * increasing across releases and expiries. Keys with a brace are hashed, so the hash tag stays intact.
 * Acquire is one script, one round trip: SET NX PX + INCR. Release and extend compare the owner first.
 * Abandoned locks: the server expires the key (PX) on its own clock.
 * Waiting: one shared subscriber connection per backend; a waiter wakes on its key's release message and
 * re-attempts. Expiry of a crashed holder publishes nothing: the core then wakes at the holder's
 * remaining PTTL, which the refused attempt returned. Fair mode (`fair: true`) serves waiters in FIFO
 * order through a queue in Redis (every client of a key must use the same mode).
 * Limits: a restart without persistence (AOF, appendfsync always) forgets held locks and fence
 * counters: it can grant a lock twice and reissue fences. Failover to an asynchronous replica can too;
 * `minReplicas` narrows that window (WAIT after acquiring). `fencelock doctor` checks these settings.
 */
import type { Cluster, Redis, RedisOptions } from 'ioredis'
import { raceSignal } from '../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  DoctorFinding,
  HeldLease,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import {
  BackendUnavailableError,
  CapabilityError,
  causeText,
  describeNetworkError,
  LockError,
  quoteKey,
} from '../../core/errors.js'
import { loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { DEFAULT_PREFIX, redisLockKeys } from './layout.js'
import {
  ACQUIRE,
  ACQUIRE_FAIR,
  EXTEND,
  INSPECT,
  LEAVE,
  RAISE_FENCE,
  RELEASE,
  RELEASE_FAIR,
  type Script,
} from './scripts.js'
import { Subscriptions } from './subscriptions.js'

/** The client methods we use: any ioredis `Redis` or `Cluster` has them. */
export type RedisClient = Redis | Cluster

export interface RedisBackendOptions {
  /** Your ioredis client (`Redis` or `Cluster`). fencelock never closes it; it opens one duplicate for pub/sub. */
  readonly client: RedisClient
  /** Prefix of every key and channel. @default 'fencelock:' */
  readonly prefix?: string | undefined
  /**
   * Serve waiters in arrival order through a queue in Redis. Every client of a key must agree.
   * @default false
   */
  readonly fair?: boolean | undefined
  /**
   * In fair mode, how long a waiter stays in line without re-attempting before it is presumed dead.
   * @default 5000
   */
  readonly waiterLivenessMs?: number | undefined
  /**
   * After acquiring, require this many replicas to acknowledge the write (`WAIT`), or release and fail.
   * Narrows (does not close) the window in which a failover to a replica loses the lock. Not on Cluster.
   * @default 0
   */
  readonly minReplicas?: number | undefined
  /** How long `WAIT` may take. @default 1000 */
  readonly replicaTimeoutMs?: number | undefined
  /** Names the store in errors; defaults to the client's address. */
  readonly id?: string | undefined
}

/** What `fromUrl` adds: a check every operation waits for (the database exists), and clients to close. */
interface Internal {
  readonly ready?: Promise<unknown>
  readonly owned: RedisClient[]
}

/** The Redis backend. */
export interface RedisBackend extends LockBackend {
  /** The lock and fence key names of `key`, for operators. */
  keysOf(key: string): { lock: string; fence: string }
  /**
   * Raises `key`'s fence counter to at least `atLeast` and returns its value afterwards: the single-node
   * step of Redlock's fencing, which writes a minted token back to a majority.
   */
  raiseFence(key: string, atLeast: bigint, signal: AbortSignal): Promise<bigint>
  /**
   * `waitForChange`, resolving with the message that woke it: "-<owner>" when `owner` released the lock,
   * `undefined` when no message did (abort, a fresh subscription). For Redlock, which hears each release
   * once per node.
   */
  waitForMessage(req: AcquireRequest, signal: AbortSignal): Promise<string | undefined>
}

const isReplyError = (error: unknown): error is Error => error instanceof Error && error.name === 'ReplyError'

function isCluster(client: RedisClient): client is Cluster {
  return (client as Cluster).isCluster === true
}

/**
 * Creates a Redis backend over your ioredis client.
 * @example
 * import { Redis } from 'ioredis'
 * const locks = createLockClient(redisBackend({ client: new Redis() }), { ttl: '15s' })
 */
export function redisBackend(options: RedisBackendOptions): RedisBackend {
  return createRedisBackend(options, { owned: [] })
}

function createRedisBackend(options: RedisBackendOptions, { ready, owned }: Internal): RedisBackend {
  const { client } = options
  if (!client || typeof (client as Redis).evalsha !== 'function') {
    throw new TypeError('Expected `client` to be an ioredis Redis or Cluster instance')
  }
  const prefix = options.prefix ?? DEFAULT_PREFIX
  const fair = options.fair ?? false
  const waiterLivenessMs = options.waiterLivenessMs ?? 5000
  const minReplicas = options.minReplicas ?? 0
  const replicaTimeoutMs = options.replicaTimeoutMs ?? 1000
  if (!Number.isInteger(minReplicas) || minReplicas < 0) {
    throw new TypeError(`Expected \`minReplicas\` to be a whole number >= 0, got ${minReplicas}`)
  }
  if (minReplicas > 0 && isCluster(client)) {
    throw new CapabilityError(
      '`minReplicas` needs a single Redis primary: WAIT must run on the connection that wrote the lock, ' +
        'which ioredis does not expose for Cluster. Use it with a primary and its replicas',
    )
  }
  const id = options.id ?? describeClient(client)
  const address = describeAddress(client)
  const subscriptions = new Subscriptions(client, owned)
  /**
   * The latest connection error of a client this backend created (a user's own client keeps its own
   * 'error' listeners: adding one would silence ioredis's warnings for them). A command that times out while
   * ioredis reconnects says nothing of why; this does.
   */
  let lastConnectionError: unknown
  for (const c of owned) {
    c.on('error', (error: unknown) => {
      lastConnectionError = error
    })
    c.on('ready', () => {
      lastConnectionError = undefined
    })
  }

  const keysOf = (key: string) => redisLockKeys(key, prefix)

  /**
   * Runs a script by its SHA; on NOSCRIPT (a restart, SCRIPT FLUSH, a failover) sends the source once. The
   * source goes out a round trip late, after whatever was sent meanwhile; an acquire whose `signal` has
   * aborted by then is not re-sent (it would grant a lock nobody waits for, after its clean-up).
   */
  const run = async (
    s: Script,
    keys: string[],
    args: Array<string | number>,
    signal?: AbortSignal,
  ): Promise<unknown> => {
    if (ready) await ready
    try {
      return await client.evalsha(s.sha, keys.length, ...keys, ...args)
    } catch (error) {
      if (isReplyError(error) && error.message.startsWith('NOSCRIPT')) {
        if (signal?.aborted) throw signal.reason
        return client.eval(s.source, keys.length, ...keys, ...args)
      }
      throw error
    }
  }

  const explain = (key: string, what: string, error: unknown): LockError => {
    if (error instanceof LockError) return error
    const message = (error as Error)?.message ?? String(error)
    if (isReplyError(error) && /WRONGTYPE|not an integer/.test(message)) {
      const k = keysOf(key)
      return new LockError(
        'FENCELOCK_KEY_CONFLICT',
        `Redis key ${k.lock} or ${k.fence} on ${id} holds data that is not a fencelock lock (${message}). ` +
          'Another program uses these names: pick another `prefix`, or remove the keys',
        { key, backend: id, cause: error },
      )
    }
    const retryable = !(isReplyError(error) && /NOAUTH|WRONGPASS|NOPERM|DB index/i.test(message))
    // In plain words: what failed on the way to the server, rather than ioredis's retry bookkeeping
    // ("Reached the max retries per request limit…") or a bare timeout while it reconnects.
    const down = client.status !== 'ready'
    const tls = !isCluster(client) && client.options.tls !== undefined
    const plain =
      describeNetworkError(error, address) ??
      (down ? describeNetworkError(lastConnectionError, address) : undefined) ??
      (down && tls && lastConnectionError === undefined
        ? `the TLS handshake with ${address} did not complete (${causeText(error)}): check that the server ` +
          'speaks TLS, or use redis:// for a plain one'
        : undefined) ??
      (down ? `${address} is unreachable (${causeText(lastConnectionError ?? error)})` : causeText(error))
    return new BackendUnavailableError(`Could not ${what} lock ${quoteKey(key)} on ${id}: ${plain}`, {
      key,
      backend: id,
      cause: error,
      retryable,
    })
  }

  const grantOf = (reply: unknown, ttlMs: number): AttemptResult => {
    const [granted, value] = reply as [number, number]
    if (granted === 1) return { granted: true, fence: BigInt(value), ttlMs }
    return value > 0 ? { granted: false, retryInMs: value } : { granted: false }
  }

  const release = async (lease: { key: string; owner: string }): Promise<boolean> => {
    const k = keysOf(lease.key)
    const reply = fair
      ? await run(
          RELEASE_FAIR,
          [k.lock, k.fence, k.queue, k.waiters, k.ttls, k.holder],
          [lease.owner, k.channel, waiterLivenessMs],
        )
      : await run(RELEASE, [k.lock, k.holder], [lease.owner, k.channel])
    return reply === 1
  }

  /** WAIT on the connection that wrote the lock; too few acknowledgements: release it and fail. */
  const awaitReplicas = async (req: AcquireRequest, grant: AttemptResult) => {
    const acks = (await (client as Redis).call('WAIT', minReplicas, replicaTimeoutMs)) as number
    if (acks >= minReplicas) return grant
    await release(req)
    throw new BackendUnavailableError(
      `Only ${acks} of the ${minReplicas} replicas required by \`minReplicas\` acknowledged lock ${quoteKey(req.key)} on ` +
        `${id} within ${replicaTimeoutMs} ms, so it was released. Check the replicas (INFO replication)`,
      { key: req.key, backend: id },
    )
  }

  return {
    id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: fair },
    limits: REDIS_LIMITS,
    keysOf: (key) => {
      const k = keysOf(key)
      return { lock: k.lock, fence: k.fence }
    },

    async tryAcquire(req, signal) {
      const k = keysOf(req.key)
      const attempt = fair
        ? run(
            ACQUIRE_FAIR,
            [k.lock, k.fence, k.queue, k.waiters, k.ttls, k.holder],
            [req.owner, req.ttlMs, waiterLivenessMs, req.holder ?? ''],
            signal,
          )
        : run(ACQUIRE, [k.lock, k.fence, k.holder], [req.owner, req.ttlMs, req.holder ?? ''], signal)
      let result: AttemptResult
      try {
        result = grantOf(await raceSignal(attempt, signal), req.ttlMs)
      } catch (error) {
        // An abort (the core's deadline, the caller) or an error reply: the core treats the outcome as
        // unknown and calls `abandon`, which removes any hold of this owner once this attempt has settled.
        if (signal.aborted || isReplyError(error)) throw explain(req.key, 'acquire', error)
        // No reply (timeout, reset): the script may have run. Read before deciding, never leave a lock we took.
        // One script reads holder, remaining lease and fence together: the lease is what the store keeps
        // now (a fair hand-over sets a short one; an earlier attempt's PX has partly run), never the ttl
        // asked for. The core counts it from this attempt's start, which is before this read.
        const read = (await raceSignal(run(INSPECT, [k.lock, k.fence], []), signal).catch(() => undefined)) as
          | [string | null, number, string | null]
          | undefined
        if (!read || read[0] !== req.owner || read[1] <= 0) throw explain(req.key, 'acquire', error)
        result = { granted: true, fence: BigInt(read[2] ?? 0), ttlMs: read[1] }
      }
      if (result.granted && minReplicas > 0) return awaitReplicas(req, result)
      return result
    },

    async raiseFence(key, atLeast, signal) {
      try {
        return BigInt(
          (await raceSignal(run(RAISE_FENCE, [keysOf(key).fence], [String(atLeast)]), signal)) as number,
        )
      } catch (error) {
        throw explain(key, 'record the fence of', error)
      }
    },

    async extend(lease, ttlMs, signal) {
      const k = keysOf(lease.key)
      try {
        const reply = await raceSignal(run(EXTEND, [k.lock, k.holder], [lease.owner, ttlMs]), signal)
        return reply === 1 ? { renewed: true } : { renewed: false }
      } catch (error) {
        throw explain(lease.key, 'extend', error)
      }
    },

    async release(lease: HeldLease, signal) {
      try {
        return await raceSignal(release(lease), signal)
      } catch (error) {
        throw explain(lease.key, 'release', error)
      }
    },

    async abandon(req, signal) {
      const k = keysOf(req.key)
      // Always, not only after a known-uncertain attempt: an abort can race any reply. Owner-checked on
      // the server, and sent on the connection that carried the attempts, so it lands after all of them.
      // LEAVE also drops our place in the fair queue and passes on a lock handed to us meanwhile.
      if (fair)
        await raceSignal(
          run(
            LEAVE,
            [k.lock, k.fence, k.queue, k.waiters, k.ttls, k.holder],
            [req.owner, k.channel, waiterLivenessMs],
          ),
          signal,
        )
      else await raceSignal(release(req), signal)
    },

    async inspect(key, signal): Promise<LockInfo | null> {
      const k = keysOf(key)
      try {
        const [owner, pttl, fence, described] = (await raceSignal(
          run(INSPECT, [k.lock, k.fence, k.holder], []),
          signal,
        )) as [string | null, number, string | null, string | null]
        if (owner === null) return fence === null ? null : { held: false, fence: BigInt(fence) }
        return {
          held: true,
          owner,
          ...describedBy(owner, described),
          ...(fence === null ? {} : { fence: BigInt(fence) }),
          ...(pttl >= 0 ? { expiresInMs: pttl } : {}),
          ...(pttl === -1 ? { note: `${k.lock} has no expiry: something outside fencelock wrote it` } : {}),
        }
      } catch (error) {
        throw explain(key, 'inspect', error)
      }
    },

    waitForMessage: (req, signal) =>
      subscriptions.wait(keysOf(req.key).channel, fair ? req.owner : undefined, signal),

    async waitForChange(req, signal) {
      const message = await subscriptions.wait(keysOf(req.key).channel, fair ? req.owner : undefined, signal)
      // Fair mode: "<owner>:<fence>:<lease ms>" means the release handed the lock to us on the server.
      if (fair && message?.startsWith(`${req.owner}:`)) {
        const [fence, lease] = message.slice(req.owner.length + 1).split(':')
        return { granted: true, fence: BigInt(fence!), ttlMs: Number(lease) }
      }
      return undefined
    },

    doctor: (signal) => doctor(client, id, minReplicas, signal),

    async close() {
      await subscriptions.close()
      // disconnect, not QUIT: QUIT waits in the offline queue of a client that cannot connect.
      for (const c of owned) c.disconnect()
    },
  }
}

/**
 * The description in a holder record "<owner> <description>", if the record is the current owner's (a
 * previous holder's record may outlive its lock by a moment, or a grant may have written none).
 */
export function describedBy(owner: string, record: string | null | undefined): { holder?: string } {
  if (!record?.startsWith(`${owner} `) || record.length === owner.length + 1) return {}
  return { holder: record.slice(owner.length + 1) }
}

/**
 * Keys: the name goes into three key names and a channel name (Redis allows 512 MB; a lock name of more
 * than 64 KiB is a mistake). Leases: PX is a signed 64-bit count of ms added to the server's clock; 2^43 ms
 * (about 278 years) stays exact in a JavaScript number and far from that overflow.
 */
export const REDIS_LIMITS = { maxKeyBytes: 65_536, maxTtlMs: 2 ** 43 } as const

/** host:port of a client, for messages. */
function describeAddress(client: RedisClient): string {
  if (isCluster(client)) return describeClient(client).replace(/^redis:\/\/|\?cluster=true$/g, '')
  return `${client.options.host ?? '127.0.0.1'}:${client.options.port ?? 6379}`
}

function describeClient(client: RedisClient): string {
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

/** The URL parameters of redis:// and rediss:// (the README's table is tested against this). */
export const PARAMS = {
  fair: { type: 'bool', default: false, doc: 'serve waiters in arrival order (a queue on the server)' },
  waiterLiveness: {
    type: 'duration',
    min: 100,
    doc: 'fair mode: how long a queued waiter that stopped asking keeps its place (default 5s)',
  },
  minReplicas: {
    type: 'int',
    min: 0,
    default: 0,
    doc: 'replicas that must acknowledge a grant (WAIT) before it counts',
  },
  replicaTimeout: { type: 'duration', doc: 'how long to wait for those acknowledgements' },
  prefix: { type: 'string', doc: 'prefix of every key and channel (default fencelock:)' },
  cluster: { type: 'bool', default: false, doc: 'the host is a seed of a Redis Cluster' },
} as const satisfies ParamSchema

/**
 * `redis://[user:password@]host:port[/db][?fair=true&minReplicas=1&replicaTimeout=1s&prefix=app:]`,
 * `rediss://…` for TLS, `redis://host:port?cluster=true` for a Cluster (the node seeds the rest).
 */
export async function fromUrl(url: URL): Promise<RedisBackend> {
  const ioredis = await loadDriver('ioredis', 'redis', url, () => import('ioredis'))
  const params = readParams(url, PARAMS)
  const dbText = url.pathname.replace(/^\//, '')
  if (dbText !== '' && !/^\d+$/.test(dbText)) {
    throw new TypeError(`Expected a database number after the port in ${redact(url)}, got "/${dbText}"`)
  }
  const port = url.port === '' ? 6379 : Number(url.port)
  const host = url.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1'
  const common: RedisOptions = {
    // Fail a command after one reconnect attempt instead of queueing it forever: the core decides
    // whether to retry, and a waiting acquire must see "unavailable", not hang.
    maxRetriesPerRequest: 1,
    connectTimeout: 5000,
    ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
    ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    ...(url.protocol === 'rediss:' ? { tls: {} } : {}),
  }
  const db = dbText === '' ? 0 : Number(dbText)
  const client: RedisClient = params.cluster
    ? new ioredis.Cluster([{ host, port }], { redisOptions: common })
    : new ioredis.Redis({ ...common, host, port, db })
  // Connection errors surface on the commands that fail; ioredis also emits them here, where nobody listens.
  client.on('error', () => {})
  const owned: RedisClient[] = [client]
  // ioredis reports a failed SELECT as an event and goes on in database 0: locks would silently land in
  // the wrong database. Select it ourselves first, and fail every operation (not retryably) if it fails.
  let ready: Promise<unknown> | undefined
  if (db !== 0) {
    ready = (client as Redis).select(db).catch((cause: unknown) => {
      throw new BackendUnavailableError(
        `Redis database ${db} in ${redact(url)} cannot be selected (${(cause as Error).message}); the server has ` +
          'fewer databases (see its `databases` setting)',
        { backend: redact(url), cause, retryable: false },
      )
    })
    ready.catch(() => {})
  }
  try {
    return createRedisBackend(
      {
        client,
        fair: params.fair,
        minReplicas: params.minReplicas,
        replicaTimeoutMs: params.replicaTimeout,
        waiterLivenessMs: params.waiterLiveness,
        prefix: params.prefix,
        id: redact(url),
      },
      { owned, ...(ready ? { ready } : {}) },
    )
  } catch (error) {
    client.disconnect()
    throw error
  }
}

async function doctor(
  client: RedisClient,
  id: string,
  minReplicas: number,
  signal: AbortSignal,
): Promise<DoctorFinding[]> {
  const findings: DoctorFinding[] = []
  const node = (isCluster(client) ? client.nodes('master')[0] : client) as Redis | undefined
  if (!node) return [{ level: 'error', message: `no reachable master in ${id}` }]
  const info = parseInfo((await raceSignal(node.info(), signal)) as string)
  findings.push({
    level: 'info',
    message: `Redis ${info.redis_version ?? 'unknown version'} (${info.redis_mode ?? 'standalone'})`,
  })
  if (info.role && info.role !== 'master') {
    findings.push({
      level: 'error',
      message: `connected to a ${info.role}: locks must be taken on the primary`,
    })
  }
  const config = async (name: string): Promise<string | undefined> => {
    try {
      const reply = (await raceSignal(node.config('GET', name), signal)) as string[]
      return reply[1]
    } catch {
      return undefined
    }
  }
  const appendonly = await config('appendonly')
  const fsync = await config('appendfsync')
  const policy = await config('maxmemory-policy')
  if (appendonly === undefined) {
    findings.push({
      level: 'warn',
      message: 'CONFIG GET is not allowed here: persistence and eviction could not be checked',
    })
  } else if (appendonly !== 'yes') {
    findings.push({
      level: 'warn',
      message:
        'appendonly is off: after a restart Redis forgets held locks and fence counters, so a lock can be ' +
        'granted twice and fences start over. Use appendonly yes with appendfsync always, or keep a crashed ' +
        'server down for longer than the longest ttl',
    })
  } else if (fsync !== 'always') {
    findings.push({
      level: 'warn',
      message: `appendfsync is ${fsync}: a crash can lose the last second of grants and fences; "always" cannot`,
    })
  } else findings.push({ level: 'ok', message: 'appendonly yes, appendfsync always' })
  if (policy !== undefined) {
    findings.push(
      policy === 'noeviction'
        ? { level: 'ok', message: 'maxmemory-policy noeviction: lock keys are never evicted' }
        : {
            level: 'warn',
            message:
              `maxmemory-policy is ${policy}: under memory pressure Redis may evict lock keys (an early ` +
              'release) or fence counters (fences start over). Use noeviction',
          },
    )
  }
  findings.push({
    level: 'info',
    message:
      info.cluster_enabled === '1' ? 'cluster mode: keys are hash-tagged per lock' : 'cluster mode: off',
  })
  const replicas = Number(info.connected_slaves ?? 0)
  if (replicas > 0 && minReplicas === 0) {
    findings.push({
      level: 'warn',
      message:
        `${replicas} replica(s) replicate asynchronously: a failover can lose a held lock. Consider ` +
        '?minReplicas=1 (WAIT after acquiring), or Redlock over independent primaries',
    })
  } else if (minReplicas > replicas) {
    findings.push({
      level: 'error',
      message: `minReplicas is ${minReplicas} but only ${replicas} replica(s) are connected: every acquire will fail`,
    })
  }
  return findings
}

/** The fields of an INFO reply. */
export function parseInfo(text: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':')
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1)
  }
  return out
}
