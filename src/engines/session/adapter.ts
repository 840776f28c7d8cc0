/**
 * The adapter interface of the session engine (pool.ts): grant a lease the adapter keeps alive and report
 * each acknowledged keep-alive and the lease's loss; one keep-alive on demand; revoke. Used by: etcd (a
 * lease, kept alive by etcd3's stream: src/backends/etcd/leases.ts); ZooKeeper (a session, kept alive by
 * the client's pings, which it does not report: the engine sends its own keep-alive requests,
 * `keepAliveEveryMs`, and the store negotiates the length, `grantedMs`: src/backends/zookeeper/sessions.ts).
 */

/** What an adapter reports about a lease it keeps alive. */
export interface LeaseEvents {
  /** A keep-alive sent at `sentAt` (monotonic clock) was acknowledged: the store keeps the lease `ttlMs` from then. */
  acknowledged(sentAt: number, ttlMs: number): void
  /** The store says the lease is gone (revoked, expired, never granted). `reason` says so in words. */
  lost(reason: Error): void
}

/** One lease on the store, kept alive by the adapter from its grant until `revoke`. */
export interface Lease<Id> {
  /** The lease's id once the store granted it; rejects if it did not. */
  readonly id: Promise<Id>
  /**
   * Optional: the lease length (ms) the store granted, read once `id` resolved, where the store may grant
   * another than the one asked (ZooKeeper negotiates the session timeout between its own bounds). Without
   * it, the grant counts the length asked.
   */
  grantedMs?(): number
  /** One keep-alive now: the ttl (ms) the store answered with, <= 0 when the lease is gone. */
  keepAliveOnce(): Promise<number>
  /**
   * Optional, for a store on which every request about the lease keeps it alive (ZooKeeper: the server
   * expires a session no earlier than its last receipt of any request from it plus the timeout): the ttl
   * (ms) that the answer to a request sent at `sentAt` (monotonic clock) proves from then, read when the
   * answer came. The engine then counts the answer to a request it sends anyway (an acquire's write) as an
   * acknowledged keep-alive, instead of sending a keep-alive beside it. Not for etcd: a transaction does
   * not extend the lease its keys are on.
   */
  requestsKeepAlive?(sentAt: number): number
  /** Stops the keep-alives, then ends the lease on the store (which removes everything on it). Never rejects. */
  revoke(): Promise<void>
  /**
   * Optional (stores whose leases can be handed on: etcd): stops the keep-alives the adapter sends by
   * itself, leaving the lease on the store; `keepAliveOnce` still works. Never throws.
   */
  stopKeepAlive?(): void
}

/** The store's side of a session. */
export interface SessionAdapter<Id> {
  /** The lease length the store grants for a lock of `ttlMs` (etcd: whole seconds, at least one). */
  leaseMs(ttlMs: number): number
  /** Asks the store for a lease of `leaseMs` (as `leaseMs()` returned), reporting to `events` from then on. */
  grant(leaseMs: number, events: LeaseEvents): Lease<Id>
  /**
   * Optional, for an adapter whose client keeps its lease alive without telling (ZooKeeper's pings): the
   * engine then sends `keepAliveOnce` itself this often (ms) for a lease granted `leaseMs` long
   * (`Lease.grantedMs`, else the length asked), from its grant until
   * it is revoked or lost, and counts each answer as an acknowledged keep-alive. Without acknowledgements
   * `aliveUntil` would stay at the grant, and a waiter granted later would get no validity left.
   */
  keepAliveEveryMs?(leaseMs: number): number
  /**
   * Optional (stores whose leases can be handed on: etcd): a lease another client granted, by its id, kept
   * alive only by `keepAliveOnce` (none sent by itself), reporting its loss to `events`.
   */
  adopt?(id: Id, events: LeaseEvents): Lease<Id>
}
