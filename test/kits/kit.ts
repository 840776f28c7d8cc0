/**
 * A test kit: everything the tests know about one backend, or one variant of it (Redis in fair mode, etcd
 * with three members), in one place: how to start its servers, the URL to reach them (also through
 * proxies), how to break a lease behind its holder's back (through the layout helpers the backend itself
 * exports, never a copied key format), how to crash, pause or restart a server, and what the backend can
 * do (its capabilities). The conformance entries (test/backends/<backend>/conformance*.test.ts), the chaos targets
 * (test/chaos/targets.ts) and the bench's fencelock adapters (bench/adapters.ts) are all built from kits;
 * a new backend adds one kit file and one line in index.ts.
 */

/** What a backend can do, as the conformance cases need to know it. A case that needs a flag the kit lacks is skipped, saying why. */
export interface KitCapabilities {
  /** Waiters are granted in arrival order (the backend's `capabilities.fifo`). */
  readonly fifo: boolean
  /** Leases live on a session the backend watches (`expiry: 'session'`, `Grant.lost`): the store can `loseSession`. */
  readonly session: boolean
  /** A release wakes waiters by a notification (the backend's `capabilities.notify`). */
  readonly notify: boolean
  /** The shortest ttl the store honours as asked; every ttl of the conformance cases is a multiple of it. */
  readonly minTtlMs: number
  /** Fences keep increasing across a restart of every server of the store (`KitStore.restart`). */
  readonly durableFences: boolean
  /** Other processes (`fencelock hold`) reach the same locks through the store's URL. */
  readonly processes: boolean
  /**
   * An extend to a longer ttl than the lock was granted with lengthens the lease the store keeps (etcd moves
   * the key to a longer lease); a store whose lease length is fixed at its grant (a ZooKeeper session's
   * negotiated timeout) caps the validity of every extend at it.
   */
  readonly longerExtend: boolean
  /**
   * A holder killed with SIGKILL: 'ttl' (absent), its lease lasts its ttl; 'at once', the store knows the
   * holder's process is gone (the file backend, on one host) and frees it on the next look.
   */
  readonly deadHolder?: 'ttl' | 'at once'
}

/** The yes/no capabilities: what a case may require. */
export type Flag = {
  [K in keyof KitCapabilities]-?: KitCapabilities[K] extends boolean ? K : never
}[keyof KitCapabilities]

export const FLAGS: readonly Flag[] = [
  'fifo',
  'session',
  'notify',
  'durableFences',
  'processes',
  'longerExtend',
]

/** Which chaos scenarios' server faults apply to a target (test/chaos/scenarios.ts reads them). */
export type ChaosFeature =
  | 'crash'
  | 'durable'
  | 'leader'
  | 'redlock'
  | 'expire'
  | 'store-faults'
  /** The kit's `deleteState`: an operator deletes lock state. */
  | 'delete-state'
  /** The kit's `isolateMember`: partitions between the members of a replicated store. */
  | 'members'
  /** The kit's `reboot`: a quick host reboot (the file backend). */
  | 'reboot'
  /** A lease ends with its holder's processes (the file backend): a killed holder's hold ends at the kill. */
  | 'process-lease'

/** A chaos target served by a kit: the name `npm run chaos -- --targets` knows it by, and the scenarios worth running there. */
export interface ChaosVariant {
  readonly name: string
  readonly features: readonly ChaosFeature[]
  /** The URL's query for the workers, instead of the kit's own (e.g. Redlock's default restartDelay). */
  readonly query?: string
  /** The backend refuses shorter ttls (`BackendLimits.minTtlMs`): scenarios with a shorter one use this. */
  readonly minTtlMs?: number
  /** Variables the workers see (a backend's test settings), set while the target runs. */
  readonly env?: Readonly<Record<string, string>>
}

/** A fencelock adapter of the bench served by a kit. */
export interface BenchVariant {
  /** The adapter's name in the tables (and how bench workers find it). */
  readonly name: string
  /** The bench store it is compared on (the peers of that store). */
  readonly store: string
  readonly note?: string
  /** The URL's query, instead of the kit's own (e.g. `?fair=true`). */
  readonly query?: string
  /** Runs on a store of its own rather than the one the kit's other adapters and the peers share. */
  readonly separate?: boolean
}

export interface StartOptions {
  /** A folder the store may keep its files in (the caller keeps or removes it); else the kit makes its own. */
  readonly dir?: string
}

/** A running store of a kit. */
export interface KitStore {
  /** The URL clients use (of this process, and of others where `processes`); `query` replaces the kit's. */
  url(query?: string): string
  /** The server ports, in order (a chaos worker gets one proxy per port); none for a local store. */
  readonly ports: readonly number[]
  /** The URL through other ports (proxies in front of `ports`, same order); absent where clients cannot be proxied. */
  urlVia?(ports: readonly number[], query?: string): string
  /** Ends `key`'s current lease behind its holder's back, as a premature expiry would; the fence stays. */
  breakLease(key: string): Promise<void>
  /** Ends the session that keeps the holder of `key` alive (kits with `session`). */
  loseSession?(key: string): Promise<void>
  /** Kills (SIGKILL) one server (`node`, default the first) and starts it again with whatever it persisted. */
  crash?(node?: number): Promise<void>
  /** Kills every server and starts them again with whatever they persisted (kits with `durableFences`). */
  restart?(): Promise<void>
  /** Freezes one server (SIGSTOP); the function returned resumes it. */
  pause?(node?: number): () => void
  /** Kills the leader of a consensus cluster and brings it back. */
  killLeader?(): Promise<void>
  /**
   * An operator deletes lock state behind everyone's back, as a clean-up of a "stuck" lock would: `key`'s
   * own state (its row, record, item, queue nodes, folder), or with `key` undefined the state of every key
   * under the store's prefix / table / root. A holder may lose its lock (expected); the fence of the next
   * grant must still be greater than every earlier one, and nobody may wait on a free lock for ever.
   */
  deleteState?(key?: string): Promise<void>
  /**
   * Cuts member `node` of a replicated store off from the other members (their links drop every byte, the
   * connections stay open), while the clients' own links to every member stay up. Resolves once the cut is
   * in place, to a function that heals it.
   */
  isolateMember?(node: number): Promise<() => Promise<void>>
  /** The index of the current leader of a consensus cluster (in `ports` order). */
  leaderIndex?(): Promise<number>
  /**
   * The host reboots quickly (the file backend): what the next process sees is a new boot id, with the
   * lock root's files as they were on disk. Processes of the old boot must be gone first (the caller's).
   */
  reboot?(): Promise<void>
  /** Faults the store's own server injects (the S3 and GCS test servers in this process). */
  readonly storeFaults?: StoreFaults
  /** The tail of each server's log, by name. */
  logs(): Record<string, string>
  /** How long after a healed fault the store may take to serve again (on top of one ttl). */
  readonly recoveryMs: number
  /** Stops the servers and removes what the kit made. */
  close(): Promise<void>
}

/** Faults a test server injects on its side of the wire, counted in requests. */
export interface StoreFaults {
  /** The next `count` writes commit, then their responses are lost (the connection is destroyed). */
  loseWriteReplies(count: number): void
  /** The next `count` requests fail with 503 (the store briefly unavailable), committing nothing. */
  unavailable(count: number): void
  /** Removes what is left of both. */
  clear(): void
}

/**
 * The primitives of the backend contract, one facet each (`slots`, the slots semaphore, is built in the core
 * over the mutex and the listing, so every kit declares it). A kit declares those its backend offers; the
 * conformance suite runs a primitive's cases (test/conformance/cases/<primitive>/) only on kits that declare it.
 */
export type Primitive =
  | 'mutex'
  | 'election'
  | 'semaphore'
  | 'slots'
  | 'rwlock'
  | 'multikey'
  | 'multikey-atomic'
  | 'resume'

export const PRIMITIVES: readonly Primitive[] = [
  'mutex',
  'election',
  'semaphore',
  'slots',
  'rwlock',
  'multikey',
  'multikey-atomic',
  'resume',
]

export interface Kit {
  /** Unique among kits, e.g. `redis-fair`. */
  readonly id: string
  /** The backend's folder under src/backends. */
  readonly backend: string
  /** The conformance suite's title. */
  readonly title: string
  /** The conformance entry that runs it: test/backends/<entry>.test.ts, e.g. `redis/conformance`. */
  readonly entry: string
  /** Clients reach it over TCP (chaos network faults apply). */
  readonly networked: boolean
  /** The primitives its backend offers (the facets of its contract); the client refuses the others. */
  readonly primitives: readonly Primitive[]
  readonly capabilities: KitCapabilities
  /** Why each flag that is off is off, in a few words: the skipped cases say it. */
  readonly lacks: Partial<Record<Flag, string>>
  start(options?: StartOptions): Promise<KitStore>
  /**
   * The part of a fence that names its grant as any client reads it back (`list`, `break`): the whole fence
   * unless said otherwise. Redlock's leaves out the node index, which only the holder knows for sure.
   */
  readonly grantOfFence?: (fence: bigint) => bigint
  readonly chaos?: readonly ChaosVariant[]
  readonly bench?: readonly BenchVariant[]
}

/**
 * The capabilities of a store whose leases end by a ttl on the store's own clock, reached by URL from any
 * process (most stores): a kit passes what differs.
 */
export const ttlStore = (differs: Partial<KitCapabilities> = {}): KitCapabilities => ({
  fifo: false,
  session: false,
  notify: true,
  minTtlMs: 300,
  durableFences: false,
  processes: true,
  longerExtend: true,
  ...differs,
})

/** Why a store without a queue is not `fifo`. */
export const RACE = 'waiters race for a released key'

/** `host:port,…` of loopback ports. */
export const loopback = (ports: readonly number[]): string => ports.map((p) => `127.0.0.1:${p}`).join(',')
