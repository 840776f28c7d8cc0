/**
 * The sql-lease engine's election parts on the in-memory fake: an observer's wake-ups (`SqlWaiting.observe`:
 * a notification of its key, a gap, the paced poll when no subscription works; never another key's news)
 * and a proclaim whose outcome is unknown, settled by a read.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { HeldLease } from '../../../src/core/backend.js'
import type { SqlRow } from '../../../src/engines/sql/adapter.js'
import { sqlLeaseBackend } from '../../../src/engines/sql/backend.js'
import type { SqlElectionAdapter } from '../../../src/engines/sql/election.js'
import { SqlWaiting } from '../../../src/engines/sql/wait.js'
import { BackendUnavailableError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { FakeSqlDialect, FakeSqlServer } from './fake-store.js'

/** Whether `promise` settled within `ms` (a check that something did NOT happen; never a speed claim). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false
  void promise.then(() => {
    settled = true
  })
  await sleep(ms)
  return settled
}

/** Waits for `promise`, failing after a generous liveness bound instead of hanging. */
async function within(promise: Promise<unknown>, what: string): Promise<void> {
  const timer = new AbortController()
  const woke = await Promise.race([
    promise.then(() => true),
    sleep(30_000, timer.signal).then(() => false),
  ]).finally(() => timer.abort())
  assert.ok(woke, `${what}: the observer was not woken within 30 s`)
}

describe('sql-lease engine: election observers', () => {
  it('an observer wakes at a notification of its key and at a gap, not at another key', async () => {
    const server = new FakeSqlServer()
    const waiting = new SqlWaiting(new FakeSqlDialect(server), 60_000, 5000)
    const stop = new AbortController()
    try {
      // The first one is woken by the subscription being made (what came before may have been missed).
      await awaitLater(waiting.observe('e', stop.signal))
      const other = awaitLater(waiting.observe('e', stop.signal))
      server.notify('another')
      assert.equal(await settlesWithin(other, 200), false, "another key's news woke the observer")
      server.notify('e')
      await within(other, 'a notification')
      const afterGap = awaitLater(waiting.observe('e', stop.signal))
      assert.equal(await settlesWithin(afterGap, 200), false, 'woken with nothing new')
      server.gap()
      await within(afterGap, 'a gap')
    } finally {
      stop.abort()
      await waiting.close()
    }
  })

  it('without a working subscription an observer wakes at the poll pace, not at once', async () => {
    const server = new FakeSqlServer()
    server.listenFails = true
    const waiting = new SqlWaiting(new FakeSqlDialect(server), 300, 50)
    const stop = new AbortController()
    try {
      await awaitLater(waiting.observe('e', stop.signal))
      const started = performance.now()
      await awaitLater(waiting.observe('e', stop.signal))
      // The subscription is not tried again for 30 s: each observer waits out the poll's pace.
      assert.ok(performance.now() - started >= 250, 'an observer without notifications woke at once')
    } finally {
      stop.abort()
      await waiting.close()
    }
  })
})

describe('sql-lease engine: proclaim with an unknown outcome', () => {
  const lease: HeldLease = { key: 'e', owner: 'me', fence: 7n, cookie: undefined }
  /** An elections dialect whose proclaim fails after sending, and whose row reads as `row`. */
  const facetOver = (row: SqlRow | undefined) => {
    const server = new FakeSqlServer()
    const dialect = {
      id: 'fake-sql://elections',
      limits: { maxKeyBytes: 1024, maxTtlMs: 2 ** 31 },
      proclaim: async () => {
        throw new BackendUnavailableError('connection reset during proclaim', { key: 'e', retryable: true })
      },
      read: async () => row,
    } as unknown as SqlElectionAdapter
    return sqlLeaseBackend(new FakeSqlDialect(server), {}, { adapter: dialect }).election!
  }
  const held = { owner: 'me', fence: 7n, remainingMs: 5000, released: false }
  const signal = new AbortController().signal

  it('is refused when the row is no longer ours (taken over, ended, gone)', async () => {
    for (const row of [
      { ...held, owner: 'other', fence: 8n, value: 'theirs' },
      { ...held, remainingMs: -1, value: 'old' },
      undefined,
    ]) {
      assert.deepEqual(await facetOver(row).proclaim(lease, 'new', signal), { proclaimed: false })
    }
  })

  it('is done when our row shows the new value, and unknown (thrown) when it shows another', async () => {
    assert.deepEqual(await facetOver({ ...held, value: 'new' }).proclaim(lease, 'new', signal), {
      proclaimed: true,
    })
    await assert.rejects(
      facetOver({ ...held, value: 'old' }).proclaim(lease, 'new', signal),
      BackendUnavailableError,
    )
  })
})
