/**
 * The Redis backend's shell: what every primitive of one backend shares (its id, limits and capabilities,
 * the store it speaks to, the one pub/sub connection of its waiters, `doctor` and `close`), with the
 * primitives on top, each from its own folder (mutex/, election/, semaphore/, rwlock/). The core's contract has the mutex's
 * methods at the backend's top level, so the shell extends the mutex; another primitive is one field here,
 * built from the same store and subscriptions (as `election`).
 */
import type { AcquireRequest, DoctorFinding, LockBackend } from '../../core/backend.js'
import { OWNER_CHECKED_RESUME } from '../../core/resume.js'
import type { RedisClient } from './connect.js'
import { doctor } from './doctor.js'
import { RedisElection } from './election/facet.js'
import { RedisAtomicAcquire } from './mutex/atomic.js'
import { RedisMutex, type ReplicaPolicy } from './mutex/facet.js'
import type { LockLayout } from './mutex/layout.js'
import type { Mode } from './mutex/mode.js'
import { RedisRwLock } from './rwlock/facet.js'
import { RedisSemaphore } from './semaphore/facet.js'
import type { RedisStore } from './store.js'
import { Subscriptions } from './subscriptions.js'

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

/**
 * Keys: the name goes into three key names and a channel name (Redis allows 512 MB; a lock name of more
 * than 64 KiB is a mistake). Leases: PX is a signed 64-bit count of ms added to the server's clock; 2^43 ms
 * (about 278 years) stays exact in a JavaScript number and far from that overflow.
 */
export const REDIS_LIMITS = { maxKeyBytes: 65_536, maxTtlMs: 2 ** 43 } as const

/** How the mutex of a backend is set up: its key names, its mode, its replica policy. */
export interface MutexSetup<R extends AcquireRequest> {
  readonly layout: LockLayout
  readonly mode: Mode<R>
  readonly replicas: ReplicaPolicy
}

/**
 * One Redis backend. `R` is the request its mutex takes: the core's `AcquireRequest` for a backend of
 * its own (`RedisBackend`), a Redlock node's request for a node (redlock/line.ts).
 */
export class RedisLockBackend<R extends AcquireRequest = AcquireRequest> extends RedisMutex<R> {
  readonly id: string
  readonly capabilities: LockBackend['capabilities']
  readonly limits = REDIS_LIMITS
  /** Leader election on the same store (election/): the plain line, whatever the mutex's mode. */
  readonly election: RedisElection
  /** Counting semaphores on the same store (semaphore/): their own line, whatever the mutex's mode. */
  readonly semaphore: RedisSemaphore
  /** Read-write locks on the same store (rwlock/): their own line, whatever the mutex's mode. */
  readonly rwlock: RedisRwLock
  /** Taking a set of keys in one script (mutex/atomic.ts): plain mode, one slot. */
  readonly multiKey: RedisAtomicAcquire
  /** A lock's key holds its owner id, which extend and release check: a token needs no more. */
  readonly resume = OWNER_CHECKED_RESUME
  readonly #store: RedisStore
  readonly #minReplicas: number
  readonly #subscriptions: Subscriptions
  /** The clients this backend opened (from a URL, and the pub/sub duplicate): closed with it. */
  readonly #owned: readonly RedisClient[]

  /** `owned`: the clients made from a URL; the pub/sub connection joins them when it opens. */
  constructor(store: RedisStore, mutex: MutexSetup<R>, owned: RedisClient[]) {
    const subscriptions = new Subscriptions(store.client, owned)
    super({ store, subscriptions, ...mutex })
    this.id = store.id
    // localHint: a wait only joins the subscriber connection's waiters (Subscriptions): a channel already
    // subscribed hears every message handled after that, and a fresh SUBSCRIBE wakes its waiters once the
    // server confirms it (a release published before then is caught by the re-attempt).
    this.capabilities = { expiry: 'server-ttl', notify: true, fifo: mutex.mode.fifo, localHint: true }
    this.election = new RedisElection({
      store,
      subscriptions,
      limits: REDIS_LIMITS,
      replicas: mutex.replicas,
    })
    this.semaphore = new RedisSemaphore({
      store,
      subscriptions,
      limits: REDIS_LIMITS,
      replicas: mutex.replicas,
    })
    this.rwlock = new RedisRwLock({ store, subscriptions, limits: REDIS_LIMITS, replicas: mutex.replicas })
    // A Redlock node's mode takes requests of its own; its backend never offers the node's atomic step.
    const mode = mutex.mode as unknown as Mode
    this.multiKey = new RedisAtomicAcquire({ store, layout: mutex.layout, mode, replicas: mutex.replicas })
    this.#store = store
    this.#minReplicas = mutex.replicas.min
    this.#subscriptions = subscriptions
    this.#owned = owned
  }

  doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    return doctor(this.#store.client, this.id, this.#minReplicas, signal, this.#store.prefix)
  }

  async close(): Promise<void> {
    await this.#subscriptions.close()
    // disconnect, not QUIT: QUIT waits in the offline queue of a client that cannot connect.
    for (const c of this.#owned) c.disconnect()
  }
}
