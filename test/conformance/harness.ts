import type { ClientOptions, LockBackend, LockClient } from '../../src/index.js'
import type { Flag, Kit, KitStore } from '../kits/kit.js'

/** What a case gets: the kit and its running store, clients that the suite closes, ttls, unique keys. */
export interface CaseContext {
  readonly kit: Kit
  /** The kit's store, started by the suite. */
  store(): KitStore
  /** `times` the kit's shortest honoured ttl, in ms: every short ttl of a case is one of these. */
  ttl(times: number): number
  /** A new client over the store (or over `backend`); the suite closes it after the case. */
  client(options?: ClientOptions, backend?: LockBackend): LockClient
  /** A new backend object over the same store, for cases that wrap it (fault injection). */
  backend(): Promise<LockBackend>
  key(label: string): string
}

/** One case of the contract. */
export interface ConformanceCase {
  /** Unique among the cases: the test's name. */
  readonly name: string
  /** The capabilities it needs: a kit without one skips it, saying which and why. */
  readonly requires?: readonly Flag[]
  run(ctx: CaseContext): Promise<void>
}
