/**
 * What a bench adapter is: a lock library (fencelock, a peer) or a hand-written floor, on one store, as
 * the scenarios drive it. The adapters themselves are in adapters.ts (and per store in cloud.ts,
 * postgres.ts, mysql.ts, zookeeper.ts); this file is the contract they all share, so none of them imports
 * another to know it.
 */

/** What the scenarios need from a running store. */
export interface Env {
  /** One Redis primary. */
  readonly redis: number
  /** Five independent Redis primaries (scenario d). */
  readonly redis5: number[]
  /** A folder for file locks. */
  readonly dir: string
  /** One etcd member's client endpoint, host:port. */
  readonly etcd: string
  /** Each fencelock adapter's URL, by adapter name (from its kit's store). */
  readonly urls: Readonly<Record<string, string>>
  /** The PostgreSQL server's URL, through the statement-counting proxy (bench/postgres.ts); '' when not started. */
  readonly postgres: string
  /** Statements sent to it so far (this process only; not passed to bp's workers). */
  readonly postgresStatements?: () => number
  /** The HTTP endpoint of each conditional-write store that was started ('s3', 'gcs', 'dynamodb'). */
  readonly endpoints: Readonly<Record<string, string>>
  /** The ZooKeeper connection string (`127.0.0.1:p1,…`), empty when no ZooKeeper was started. */
  readonly zookeeper: string
}

export interface Held {
  release(): Promise<void>
  readonly fence?: bigint
}

/** One lock user: a client with its own connections, as a worker in an application would have. */
export interface Locker {
  /** Waits until `key` is ours (or throws when the library gives up). */
  acquire(key: string): Promise<Held>
  close(): Promise<void>
}

export interface Adapter {
  readonly name: string
  /** Which store it runs on ('memory', 'file', 'redis', 'redis x5', 'etcd', 's3', 'gcs', 'dynamodb', 'postgres', 'mysql', 'zookeeper'); ratios compare fencelock with the best peer on the same store. */
  readonly store: string
  readonly kind: 'fencelock' | 'peer' | 'floor'
  /** Whether each grant carries a fencing token. */
  readonly fences: boolean
  /** Floors never wait: they are measured uncontended only. */
  readonly waits: boolean
  /** Several lockers of this adapter exclude each other across clients (false for an in-process mutex per client). */
  readonly createLocker: (env: Env) => Promise<Locker>
  readonly note?: string
  /**
   * A waiter sleeps a whole lease (the bench's 30 s) before it tries again, released or not: scenario h
   * measures only what it sends while it waits, not 300 handoffs of 30 s each.
   */
  readonly handoffAfterLease?: boolean
}
