/**
 * The sql-lease engine's retiring of rows (src/engines/sql/engine.ts), against the in-memory adapter with
 * a row-deleting release and a `retire` of its own: the housekeeping after a grant (paced, again at once
 * after a full batch, its failures harmless), a lost release reply whose row is gone, and `inspect` of a
 * retired name.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { AcquireRequest } from '../../../src/core/backend.js'
import { sqlLeaseBackend } from '../../../src/engines/sql/backend.js'
import { BackendUnavailableError } from '../../../src/index.js'
import { waitUntil } from '../../support/wait.js'
import { FakeSqlDialect, FakeSqlServer } from './fake-store.js'

const signal = () => AbortSignal.timeout(10_000)
const req = (key: string, owner = 'a'.repeat(32)): AcquireRequest => ({ key, owner, ttlMs: 1000 })

/** An adapter whose release deletes the row (as PostgreSQL's), with `retire` answering `answers` in turn. */
function retiring(server: FakeSqlServer, answers: Array<number | Error>) {
  const adapter = new FakeSqlDialect(server)
  const calls: Array<{ endedMs: number; limit: number }> = []
  const release = adapter.release.bind(adapter)
  return {
    calls,
    adapter: Object.assign(adapter, {
      release: async (key: string, owner: string, fence: bigint | undefined, s: AbortSignal) => {
        try {
          return await release(key, owner, fence, s)
        } finally {
          // Applied (its reply lost or not): the row is gone.
          if (server.rows.get(key)?.released) server.rows.delete(key)
        }
      },
      retire: async (endedMs: number, limit: number) => {
        calls.push({ endedMs, limit })
        const answer = answers.shift() ?? 0
        if (answer instanceof Error) throw answer
        return answer
      },
    }),
  }
}

describe('sql-lease: retiring rows', () => {
  it('a grant retires in the background, at most once a while, and at once again after a full batch', async () => {
    const server = new FakeSqlServer()
    const { adapter, calls } = retiring(server, [500, 3, 0])
    const backend = sqlLeaseBackend(adapter)
    assert.ok((await backend.tryAcquire(req('a'), signal())).granted)
    await waitUntil(async () => calls.length === 1, 'the first grant retires', { withinMs: 5000 })
    assert.ok(calls[0]!.endedMs >= 60_000, `rows ended ${calls[0]!.endedMs} ms ago at least`)
    // A full batch: a backlog, so the next grant retires again at once.
    await new Promise((resolve) => setImmediate(resolve))
    assert.ok((await backend.tryAcquire(req('b'), signal())).granted)
    await waitUntil(async () => calls.length === 2, 'after a full batch, the next grant retires', {
      withinMs: 5000,
    })
    await new Promise((resolve) => setImmediate(resolve))
    // Less than a batch: the next grants do not retire for a while.
    for (const key of ['c', 'd', 'e']) assert.ok((await backend.tryAcquire(req(key), signal())).granted)
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(calls.length, 2)
    await backend.close()
  })

  it('a failing retire costs the grant nothing', async () => {
    const server = new FakeSqlServer()
    const failure = new BackendUnavailableError('connection reset', { backend: 'fake', retryable: true })
    const { adapter, calls } = retiring(server, [failure])
    const backend = sqlLeaseBackend(adapter)
    const granted = await backend.tryAcquire(req('a'), signal())
    assert.ok(granted.granted)
    await waitUntil(async () => calls.length === 1, 'the grant retires', { withinMs: 5000 })
    await backend.close()
  })

  it('a release whose reply was lost and whose row is gone was ours: released', async () => {
    const server = new FakeSqlServer()
    const { adapter } = retiring(server, [])
    const backend = sqlLeaseBackend(adapter)
    const granted = await backend.tryAcquire(req('k'), signal())
    assert.ok(granted.granted)
    adapter.next('release', 'lose-reply')
    const lease = { key: 'k', owner: 'a'.repeat(32), fence: granted.fence, cookie: undefined }
    assert.equal(await backend.release(lease, signal()), true)
    assert.equal(server.rows.has('k'), false)
    await backend.close()
  })

  it("inspect of a retired name: free, with the table's latest fence when the adapter has one", async () => {
    const server = new FakeSqlServer()
    const { adapter } = retiring(server, [])
    const backend = sqlLeaseBackend(Object.assign(adapter, { latestFence: async () => 7n }))
    const granted = await backend.tryAcquire(req('k'), signal())
    assert.ok(granted.granted)
    await backend.release(
      { key: 'k', owner: 'a'.repeat(32), fence: granted.fence, cookie: undefined },
      signal(),
    )
    assert.deepEqual(await backend.inspect('k', signal()), { held: false, fence: 7n })
    await backend.close()
  })
})
