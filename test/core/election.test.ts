/**
 * The election's own behaviour, on the memory backend: campaign, terms, proclaim, resign, loss, the
 * observer's views (vacancy included), `isMe`, bad input and the refusal of a backend without the facet.
 * Every backend's election runs the conformance cases (test/conformance) besides.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { memoryBackend } from '../../src/backends/memory/index.js'
import { CapabilityError, createLockClient, type LeaderView, LockLostError } from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import { uniqueKey } from './fakes.js'

const fresh = () => memoryBackend({ name: uniqueKey() })

/** Collects an observer's views until `last` says a view is the last one wanted. */
async function views(
  iterable: AsyncIterable<LeaderView>,
  last: (view: LeaderView) => boolean,
): Promise<LeaderView[]> {
  const out: LeaderView[] = []
  for await (const view of iterable) {
    out.push(view)
    if (last(view)) break
  }
  return out
}

describe('election', () => {
  it('one leader at a time, terms that increase, the value published', async () => {
    const backend = fresh()
    const a = createLockClient(backend)
    const b = createLockClient(backend)
    const name = uniqueKey()
    const first = await a.election(name).campaign({ value: 'http://a:8080' })
    assert.equal(first.value, 'http://a:8080')
    assert.equal(first.fence, first.term)
    const view = await b.election(name).leader()
    assert.ok(view.leader)
    assert.equal(view.value, 'http://a:8080')
    assert.equal(view.term, first.term)
    assert.equal(view.isMe, false)
    const mine = await a.election(name).leader()
    assert.ok(mine.leader && mine.isMe)
    // A second candidate waits while the first leads.
    assert.equal(
      await b
        .election(name)
        .campaign({ value: 'b', timeout: 0 })
        .catch((e) => e.name),
      'LockNotAcquiredError',
    )
    const waiting = awaitLater(b.election(name).campaign({ value: 'http://b:8080' }))
    await first.resign()
    const second = await waiting
    assert.ok(second.term > first.term, `term ${second.term} after ${first.term}`)
    await second.resign()
    await Promise.all([a.close(), b.close()])
  })

  it('proclaim replaces the value while leading, and fails once leadership is lost', async () => {
    const backend = fresh()
    const locks = createLockClient(backend)
    const name = uniqueKey()
    const lead = await locks.election(name).campaign({ value: 'one' })
    await lead.proclaim('two')
    assert.equal(lead.value, 'two')
    const view = await locks.election(name).leader()
    assert.ok(view.leader && view.value === 'two')
    // An operator ends the leadership behind the leader's back: its next write finds out.
    await backend.election.breakLock(name)
    await assert.rejects(lead.proclaim('three'), LockLostError)
    assert.ok(lead.signal.aborted)
    assert.ok(lead.signal.reason instanceof LockLostError)
    assert.match((lead.signal.reason as Error).message, /^Leadership of election/)
    const after = await locks.election(name).leader()
    assert.equal(after.leader, false)
    await locks.close()
  })

  it('observe: the leader, a new value, the vacancy, the next leader', async () => {
    const backend = fresh()
    const leaders = createLockClient(backend)
    const watcher = createLockClient(backend)
    const name = uniqueKey()
    const stop = new AbortController()
    const seen = awaitLater(
      views(watcher.election(name).observe({ signal: stop.signal }), (v) => v.leader && v.value === 'b'),
    )
    const lead = await leaders.election(name).campaign({ value: 'a' })
    await new Promise((resolve) => setTimeout(resolve, 50))
    await lead.proclaim('a2')
    await new Promise((resolve) => setTimeout(resolve, 50))
    await lead.resign()
    await new Promise((resolve) => setTimeout(resolve, 50))
    const next = await leaders.election(name).campaign({ value: 'b' })
    const got = await seen
    stop.abort()
    const shown = got.map((v) => (v.leader ? `leader ${v.value}` : 'vacant'))
    // The observer's first read may come before the first campaign or after it: both starts are right.
    if (shown[0] === 'vacant') shown.shift()
    assert.deepEqual(shown, ['leader a', 'leader a2', 'vacant', 'leader b'])
    const last = got.at(-1)!
    assert.ok(last.leader && last.term !== undefined && last.term > lead.term)
    await next.resign()
    await Promise.all([leaders.close(), watcher.close()])
  })

  it('observe sees a vacancy when a leader stops renewing and its lease ends', async () => {
    const backend = fresh()
    const locks = createLockClient(backend)
    const name = uniqueKey()
    await locks.election(name).campaign({ value: 'x', ttl: 300, renew: false })
    const stop = new AbortController()
    const got = await views(locks.election(name).observe({ signal: stop.signal }), (v) => !v.leader)
    stop.abort()
    assert.deepEqual(
      got.map((v) => v.leader),
      [true, false],
    )
    await locks.close()
  })

  it('withLeadership runs while leading and resigns after', async () => {
    const locks = createLockClient(fresh())
    const name = uniqueKey()
    const term = await locks.election(name).withLeadership(async (lead) => {
      const view = await locks.election(name).leader()
      assert.ok(view.leader && view.isMe)
      return lead.term
    })
    assert.equal(typeof term, 'bigint')
    assert.equal((await locks.election(name).leader()).leader, false)
    await locks.close()
  })

  it('refuses bad values, names and a backend without elections, before any I/O', async () => {
    const locks = createLockClient(fresh())
    const name = uniqueKey()
    await assert.rejects(locks.election(name).campaign({ value: 'x'.repeat(1025) }), /at most 1024 bytes/)
    await assert.rejects(locks.election(name).campaign({ value: 'a\u0000b' }), /NUL/)
    await assert.rejects(locks.election(name).campaign({ value: 7 as unknown as string }), TypeError)
    assert.throws(() => locks.election(''), TypeError)
    await locks.close()
    const { election: _none, ...withoutElection } = fresh()
    const plain = createLockClient({ ...withoutElection, id: 'memory:plain' })
    await assert.rejects(plain.election(name).campaign(), (error: unknown) => {
      assert.ok(error instanceof CapabilityError)
      assert.match(error.message, /election .* on memory:plain: this backend offers no leader election/)
      return true
    })
    await assert.rejects(plain.election(name).leader(), CapabilityError)
    await plain.close()
  })
})
