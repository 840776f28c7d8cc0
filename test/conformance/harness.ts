import type { ClientOptions, LockBackend, LockClient } from '../../src/index.js'

/** What a backend's test entry provides to run the shared conformance suite against it. */
export interface ConformanceHarness {
  /** The backend's folder name under src/backends. */
  readonly name: string
  /**
   * The URL other processes (`fencelock hold`) use to reach the same locks, asked for once setup has run;
   * omit it for process-local stores.
   */
  readonly url?: () => string
  /** A new client over the same store; the suite closes each one it creates. */
  createClient(options?: ClientOptions): LockClient
  /**
   * A new backend object over the same store, for cases that wrap it (fault injection). Defaults to the
   * backend `url` names; process-local stores without a URL provide it.
   */
  createBackend?(): LockBackend | Promise<LockBackend>
  /** Ends `key`'s current lease behind its holder's back (the store "forgets" it, as after an expiry). */
  breakLease(key: string): Promise<void>
  /** Runs once before the suite, e.g. to start a server. */
  setup?(): Promise<void>
  /** Runs once after the suite, e.g. to stop the server it started. */
  teardown?(): Promise<void>
}

/** Context the cases share: a client factory that remembers what to close, and a unique key per test. */
export interface CaseContext {
  readonly harness: ConformanceHarness
  client(options?: ClientOptions): LockClient
  /** A new backend object over the same store (see `ConformanceHarness.createBackend`). */
  backend(): Promise<LockBackend>
  key(label: string): string
}
