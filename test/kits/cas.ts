/**
 * What the kits of the cas-lease backends (S3, GCS) share: their capabilities, the reasons for what they
 * lack, breaking a lease through the backend's own driver and the engine's break, and a pause of an in-process
 * test server.
 */

import type { CasAdapter } from '../../src/engines/cas/adapter.js'
import { casLeaseBackend } from '../../src/engines/cas/backend.js'
import type { FakeServer, FaultMatch } from '../servers/http-fake.js'
import { type ChaosVariant, type Kit, type KitStore, RACE, type StoreFaults } from './kit.js'

/** Capabilities of a cas-lease store served by a test server in this process that keeps its state across restarts. */
export const casCapabilities = (minTtlMs: number): Kit['capabilities'] => ({
  fifo: false,
  session: false,
  notify: false,
  minTtlMs,
  durableFences: true,
  processes: true,
  longerExtend: true,
})

export const CAS_LACKS: Kit['lacks'] = {
  fifo: RACE,
  session: 'leases end by observed expiry (a version unchanged for a lease), no session',
  notify: 'the store cannot notify: waiters poll the record',
}

/**
 * Ends `key`'s lease behind its holder's back, as a premature expiry would: the engine's own break
 * (src/engines/cas/operations.ts) rewrites the record as released, with its fence, by a conditional
 * replace through the backend's driver. The holder's next renewal then meets a new version and loses the lock.
 */
export async function releaseBehindHolder(driver: CasAdapter, key: string): Promise<void> {
  await casLeaseBackend(driver).breakLock?.(key, { signal: AbortSignal.timeout(10_000) })
}

/** A running in-process test server as a kit's store. */
export interface FakeStoreParts {
  /** Names its log. */
  readonly name: string
  readonly server: FakeServer<unknown, unknown>
  /** The backend URL through `port` (the server's own, or a proxy's), with the kit's query appended. */
  readonly urlAt: (port: number, query: string) => string
  /** The backend's own driver on the kit's bucket and prefix, to break leases with. */
  readonly driver: CasAdapter
  /** Which requests are the record's writes (their lost replies are the interesting ones). */
  readonly writes: FaultMatch
  /** Deletes `key`'s record, or every record under the kit's prefix (`KitStore.deleteState`). */
  readonly deleteState: (key?: string) => Promise<void>
}

/** The chaos targets of a fake-served cas store: every server fault it can do (`minTtlMs`: the backend's). */
export const fakeChaos = (name: string, minTtlMs?: number): readonly ChaosVariant[] => [
  {
    name,
    features: ['crash', 'durable', 'expire', 'store-faults', 'delete-state'],
    ...(minTtlMs === undefined ? {} : { minTtlMs }),
  },
]

/** The test server's own switches as chaos store faults. */
function storeFaultsOf(server: FakeServer<unknown, unknown>, writes: FaultMatch): StoreFaults {
  return {
    loseWriteReplies: (count) => server.dropResponseAfterCommit(count, writes),
    unavailable: (count) => server.failNext(count, 503),
    clear: () => server.clearFaults(),
  }
}

export function fakeKitStore({ name, server, urlAt, driver, writes, deleteState }: FakeStoreParts): KitStore {
  return {
    deleteState,
    url: (query = '') => urlAt(server.port, query),
    ports: [server.port],
    urlVia: ([port], query = '') => urlAt(port!, query),
    breakLease: (key) => releaseBehindHolder(driver, key),
    // In process, a crash is a restart that keeps what the server committed (a durable store).
    crash: () => server.restart(),
    restart: () => server.restart(),
    // Every request waits between arrival and commit until resumed.
    pause: () => server.hold(),
    storeFaults: storeFaultsOf(server, writes),
    logs: () => ({
      [name]: server.requests
        .slice(-20)
        .map((r) => `${r.method} ${r.path} ${r.status}`)
        .join('\n'),
    }),
    recoveryMs: 2000,
    async close() {
      await driver.close()
      await server.close()
    },
  }
}
