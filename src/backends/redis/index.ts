/**
 * redis://host:port[/db] and rediss:// (TLS) — one Redis primary, or a Redis Cluster (`?cluster=true`).
 *
 * Layout (mutex/layout.ts, mutex/scripts.ts): `<prefix>{<key>}` = "<owner> <description>" with the lease
 * as PX expiry (the description for `inspect`); `<prefix>{<key>}:fence` = the last fence minted, kept an
 * hour; fair mode keeps the owner id alone in the lock key, the description in `…:holder` (with the
 * lock's expiry), and adds `…:queue`, `…:waiters`, `…:ttls`; releases publish
 * on `…:released`. Keys with a brace are hashed, so the hash tag stays intact and every
 * key of a lock sits in one Cluster slot; their grants record the key in `…:name` (as long as the fence
 * key), so `list` can name them. Acquire is one script, one round trip: SET NX PX + mint. Release
 * and extend compare the owner first.
 * Expiry: the server expires the key (PX) on its own clock; a fair waiter that stops asking is skipped
 * after its liveness period (`waiterLiveness`, the server's TIME).
 * Fence: minted by the same script that grants, so it belongs to exactly one grant: the server's clock in
 * µs, or the last fence + 1 if larger (MINT in mutex/scripts.ts). It keeps rising when the fence key is lost
 * (an operator, a restart without persistence) or comes back older (a snapshot, a lagging replica): only
 * the server's clock set back can undo it.
 * Waiting: one shared subscriber connection per backend; a waiter wakes on its key's release message and
 * re-attempts. Expiry of a crashed holder publishes nothing: the core then wakes at the holder's remaining
 * PTTL, which the refused attempt returned. Fair mode (`fair: true`) serves waiters in FIFO order through a
 * queue in Redis and hands a released lock to the next waiter on the server (every client of a key must use
 * the same mode).
 * Limits: keys up to 64 KiB, leases up to 2^43 ms (REDIS_LIMITS). A restart without persistence (AOF,
 * appendfsync always) forgets held locks: it can grant a lock twice.
 * Failover to an asynchronous replica can too; `minReplicas` narrows that window (WAIT after acquiring).
 * `fencelock doctor` checks these settings.
 *
 * Files: one folder per primitive, holding all of it (its scripts, key names and modes); beside them, what
 * every primitive shares. A new primitive is a folder beside mutex/ and one field in shell.ts (see the
 * header of mutex/facet.ts).
 * - mutex/: the lock. facet.ts: the contract (attempt, read-back, extend, release, inspect, list, break,
 *   wait), the same in both modes; mode.ts, plain.ts, fair.ts: what differs between the modes (the
 *   scripts of acquire, release and abandon); scripts.ts: its Lua, each script one atomic step;
 *   layout.ts: the key and channel names of a lock (the tests use them too); listing.ts: `list`'s pattern
 *   of the lock keys, and the user's key back from a key name (also Redlock's); atomic.ts: the `multiKey`
 *   facet, a set of keys taken in one script (plain mode, one Cluster slot).
 * - election/: leader election (the `election` facet). facet.ts: campaign, proclaim, extend, resign,
 *   inspect, and the waits of candidates and observers; scripts.ts: its Lua (terms minted by the mutex's
 *   MINT); layout.ts: its keys `<prefix>!election{<name>}` (`:term`, `:value`, `:holder`), apart from
 *   every lock's, and its channels.
 * - semaphore/: counting semaphores (the `semaphore` facet). facet.ts: acquire (in line), extend, release,
 *   abandon, holders, setLimit, inspect and the wait; scripts.ts: its Lua, one script per operation, expiry
 *   by the server's TIME, sequences by the mutex's MINT; layout.ts: its keys `<prefix>!semaphore{<name>}`
 *   (`:limit`, `:leases`, `:grants`, `:line`, `:kept`, `:sequence`), apart from every lock's and
 *   election's, and its one channel (`:changed`).
 * - rwlock/: read-write locks (the `rwlock` facet). facet.ts: acquire (in line, read or write), extend,
 *   release, abandon, downgrade, holders, inspect and the wait; scripts.ts: its Lua, one script per
 *   operation, expiry by the server's TIME, fences by the mutex's MINT (readers share an epoch); layout.ts:
 *   its keys `<prefix>!rwlock{<name>}` (`:line`, `:writers`, `:ends`, `:grants`, `:epoch`, `:fence`),
 *   apart from every other primitive's, and its one channel (`:changed`).
 * - lease-line/: what the primitives with a line of their own (semaphore/, rwlock/) share, for the next one
 *   to reuse. facet.ts: a base class (the parts, read-back, the minReplicas give-back, abandon, inspect,
 *   the wait); scripts.ts: Lua fragments (chunked removal, the owner check, the read-back script).
 * - shell.ts: the backend itself: its primitives, with the limits, capabilities, `doctor` and `close`
 *   they share.
 * - store.ts: runs scripts by SHA (NOSCRIPT falls back to the source) and explains failures; lua.ts: a
 *   script's SHA, and the Lua every primitive's scripts share.
 * - keys.ts: the prefix and the hash tag of every key name, and the Cluster slot of a name.
 * - subscriptions.ts: one pub/sub connection shared by a backend's waiters.
 * - scan.ts: SCAN of one server a page at a time, for `list` (also Redlock's).
 * - connect.ts: a URL to an ioredis client (also each Redlock node's).
 * - doctor.ts: `fencelock doctor`'s checks of the server's settings.
 */
import { CapabilityError } from '../../core/errors.js'
import { loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { connect, type RedisClient } from './connect.js'
import { DEFAULT_PREFIX } from './keys.js'
import { FairMode } from './mutex/fair.js'
import { LockLayout } from './mutex/layout.js'
import { PlainMode } from './mutex/plain.js'
import { type RedisBackend, RedisLockBackend } from './shell.js'
import { describeClient, isCluster, RedisStore } from './store.js'

export type { RedisClient } from './connect.js'
export { parseInfo } from './doctor.js'
export { describedBy } from './mutex/facet.js'
export { REDIS_LIMITS, type RedisBackend } from './shell.js'

/** What `redisBackend` is told. */
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
   * Plain mode: a waiter refused for this long marks itself starving on the server, and the lock, once
   * free, goes to it before anyone else (one marked waiter at a time). 0 turns the bound off.
   * @default 1000
   */
  readonly starvationMs?: number | undefined
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

/**
 * Creates a Redis backend over your ioredis client.
 * @example
 * import { Redis } from 'ioredis'
 * const locks = createLockClient(redisBackend({ client: new Redis() }), { ttl: '15s' })
 */
export function redisBackend(options: RedisBackendOptions): RedisBackend {
  return createRedisBackend(options, [])
}

/**
 * `owned`: the clients made from a URL, which the backend closes (a user's own client it never closes);
 * `ready`: a check every command waits for (the URL's database is selected).
 */
function createRedisBackend(options: RedisBackendOptions, owned: RedisClient[], ready?: Promise<unknown>) {
  const { client } = options
  if (!client || typeof (client as { evalsha?: unknown }).evalsha !== 'function') {
    throw new TypeError('Expected `client` to be an ioredis Redis or Cluster instance')
  }
  const minReplicas = options.minReplicas ?? 0
  if (!Number.isInteger(minReplicas) || minReplicas < 0) {
    throw new TypeError(`Expected \`minReplicas\` to be a whole number >= 0, got ${minReplicas}`)
  }
  if (minReplicas > 0 && isCluster(client)) {
    throw new CapabilityError(
      '`minReplicas` needs a single Redis primary: WAIT must run on the connection that wrote the lock, ' +
        'which ioredis does not expose for Cluster. Use it with a primary and its replicas',
    )
  }
  const starvationMs = options.starvationMs ?? 1000
  if (!Number.isFinite(starvationMs) || starvationMs < 0) {
    throw new TypeError(`Expected \`starvationMs\` to be a number of ms >= 0, got ${starvationMs}`)
  }
  const store = new RedisStore(client, {
    prefix: options.prefix ?? DEFAULT_PREFIX,
    id: options.id ?? describeClient(client),
    ready,
    owned,
  })
  const layout = new LockLayout(store.prefix)
  const mode = options.fair
    ? new FairMode(store, layout, options.waiterLivenessMs ?? 5000)
    : new PlainMode(store, layout, starvationMs)
  const replicas = { min: minReplicas, timeoutMs: options.replicaTimeoutMs ?? 1000 }
  return new RedisLockBackend(store, { layout, mode, replicas }, owned)
}

/** The URL parameters of redis:// and rediss:// (its page in docs/backends/ is tested against this). */
export const PARAMS = {
  fair: { type: 'bool', default: false, doc: 'serve waiters in arrival order (a queue on the server)' },
  waiterLiveness: {
    type: 'duration',
    min: 100,
    doc: 'fair mode: how long a queued waiter that stopped asking keeps its place (default 5s)',
  },
  starvation: {
    type: 'duration',
    min: 0,
    doc: 'plain mode: how long a refused waiter waits before the lock, once free, goes to it first (default 1s; 0 turns this off)',
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
 * `redis://[user:password@]host:port[/db][?fair=true&minReplicas=1&replicaTimeout=1s&prefix=app:&starvation=1s]`,
 * `rediss://…` for TLS, `redis://host:port?cluster=true` for a Cluster (the node seeds the rest).
 */
export async function fromUrl(url: URL): Promise<RedisBackend> {
  const ioredis = await loadDriver('ioredis', 'redis', url, () => import('ioredis'))
  const params = readParams(url, PARAMS)
  const { client, ready } = connect(ioredis, url, { cluster: params.cluster })
  try {
    return createRedisBackend(
      {
        client,
        fair: params.fair,
        minReplicas: params.minReplicas,
        replicaTimeoutMs: params.replicaTimeout,
        waiterLivenessMs: params.waiterLiveness,
        starvationMs: params.starvation,
        prefix: params.prefix,
        id: redact(url),
      },
      [client],
      ready,
    )
  } catch (error) {
    client.disconnect()
    throw error
  }
}
