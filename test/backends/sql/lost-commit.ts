/**
 * The lost COMMIT reply every sql-lease primitive is tested against (atomic sets, semaphores, read-write
 * locks): through a proxy in front of the server, replies are lost from the transaction's COMMIT on, so
 * the server commits the grant and the client never hears of it; the caller gives up, the connection
 * breaks, and the core's clean-up must undo that grant rather than leave it held for its 120 s lease.
 */
import assert from 'node:assert/strict'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { startProxy } from '../../support/proxy.js'
import { waitUntil } from '../../support/wait.js'

/** Where the proxy goes, and how the store's wire protocol carries a COMMIT. */
export interface CommitTarget {
  readonly port: number
  urlVia(port: number): string
  isCommit(chunk: Buffer): boolean
}

/** What a case gives: its acquire on the proxied client, and what the store shows before and after. */
export interface LostCommitCase {
  acquire(locks: LockClient, signal: AbortSignal): Promise<unknown>
  /** The grant is committed on the server. */
  committed(): Promise<boolean>
  /** The clean-up undid it. */
  undone(): Promise<boolean>
}

/** A liveness bound on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 50 }

export async function givenUpAfterLostCommit(target: CommitTarget, c: LostCommitCase): Promise<void> {
  const proxy = await startProxy(target.port)
  const locks = createLockClient(target.urlVia(proxy.port), { ttl: '120s' })
  try {
    let commitSent = false
    proxy.filter = (chunk, direction) => {
      if (!commitSent && direction === 'request' && target.isCommit(chunk)) {
        commitSent = true
        proxy.mode = 'drop-replies'
      }
      return true
    }
    const stop = new AbortController()
    const acquiring = awaitLater(c.acquire(locks, stop.signal))
    await waitUntil(c.committed, 'the grant committed on the server', WITHIN)
    stop.abort(new Error('given up'))
    proxy.filter = undefined
    proxy.mode = 'pass'
    proxy.cut()
    await assert.rejects(acquiring, /given up/)
    await waitUntil(c.undone, 'the unconfirmed grant undone by the clean-up (its lease has 120 s)', WITHIN)
  } finally {
    await locks.close()
    await proxy.close()
  }
}
