/**
 * Atomic multi-key acquisition on a sql-lease store (PostgreSQL, MySQL/MariaDB), where the conformance
 * cases cannot reach: a transaction whose COMMIT the server applied but whose reply never arrived
 * (lost-commit.ts). The acquire given up then must release every key it took, not leave them held for the
 * whole lease. Each backend's test file supplies a `SqlAtomicTarget` on its real server.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { ClientOptions, LockClient } from '../../../src/index.js'
import { type CommitTarget, givenUpAfterLostCommit } from './lost-commit.js'

export interface SqlAtomicTarget extends CommitTarget {
  /** A new client of the store, closed after the block. */
  client(options?: ClientOptions): LockClient
}

export function atomicTests(target: () => SqlAtomicTarget): void {
  it('an atomic acquire given up after its commit reply was lost leaves no key held', async () => {
    const keys = ['lost-commit:1', 'lost-commit:2', 'lost-commit:3']
    const observer = target().client({ ttl: '20s' })
    const held = async () => (await Promise.all(keys.map((key) => observer.inspect(key)))).map((i) => i.held)
    await givenUpAfterLostCommit(target(), {
      acquire: (locks, signal) => locks.acquireAll(keys, { atomic: true, timeout: '120s', signal }),
      committed: async () => (await held()).every(Boolean),
      undone: async () => !(await held()).some(Boolean),
    })
    const all = await observer.tryAcquireAll(keys, { atomic: true })
    assert.ok(all, 'every key is free')
    await all.release()
  })
}
