/**
 * Atomic multi-key acquisition on a sql-lease store (PostgreSQL, MySQL/MariaDB), where the conformance
 * cases cannot reach: a transaction whose COMMIT the server applied but whose reply never arrived. The
 * acquire given up then must undo every key it may have taken, not leave them held for the whole lease.
 * Each backend's test file supplies a `SqlAtomicTarget` on its real server.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { type ClientOptions, createLockClient, type LockClient } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { startProxy } from '../../support/proxy.js'
import { waitUntil } from '../../support/wait.js'

export interface SqlAtomicTarget {
  /** A new client of the store, closed after the block. */
  client(options?: ClientOptions): LockClient
  /** The server's port, and the store's URL through a proxy on `port` in front of it. */
  readonly port: number
  urlVia(port: number): string
  /** Whether a chunk a client sends is the COMMIT of its transaction, as the wire protocol carries it. */
  isCommit(chunk: Buffer): boolean
}

/** A liveness bound on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 50 }

export function atomicTests(target: () => SqlAtomicTarget): void {
  it('an atomic acquire given up after its commit reply was lost leaves no key held', async () => {
    const keys = ['lost-commit:1', 'lost-commit:2', 'lost-commit:3']
    const observer = target().client({ ttl: '20s' })
    const heldBy = async (owner?: string) =>
      (await Promise.all(keys.map((key) => observer.inspect(key)))).map(
        (info) => info.held && (owner === undefined || info.owner === owner),
      )
    const proxy = await startProxy(target().port)
    const locks = createLockClient(target().urlVia(proxy.port), { ttl: '120s' })
    try {
      let commitSent = false
      proxy.filter = (chunk, direction) => {
        // From the transaction's COMMIT on, replies are lost: the server commits, the client never hears.
        if (!commitSent && direction === 'request' && target().isCommit(chunk)) {
          commitSent = true
          proxy.mode = 'drop-replies'
        }
        return true
      }
      const stop = new AbortController()
      const acquiring = awaitLater(
        locks.acquireAll(keys, { atomic: true, timeout: '120s', signal: stop.signal }),
      )
      await waitUntil(
        async () => (await heldBy()).every(Boolean),
        'every key committed on the server',
        WITHIN,
      )
      stop.abort(new Error('given up'))
      proxy.filter = undefined
      proxy.mode = 'pass'
      proxy.cut()
      await assert.rejects(acquiring, /given up/)
      await waitUntil(
        async () => !(await heldBy()).some(Boolean),
        'the unconfirmed keys released by the clean-up (their lease has 120 s)',
        WITHIN,
      )
      const all = await observer.tryAcquireAll(keys, { atomic: true })
      assert.ok(all, 'every key is free')
      await all.release()
    } finally {
      await locks.close()
      await proxy.close()
    }
  })
}
