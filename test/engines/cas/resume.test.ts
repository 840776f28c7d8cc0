/**
 * Resuming a cas-lease lock from its token (src/engines/cas/resume.ts) against the in-memory store, with the
 * store's clock in the test's hands: a lease is continued only while it is live by the store's clock, at the
 * resume's read AND at its write's answer, never revived after its time because nobody was waiting; a
 * renewal of the original holder racing the resume is followed, not taken for a loss.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { casLeaseBackend } from '../../../src/engines/cas/backend.js'
import { encodeRecord } from '../../../src/engines/cas/record.js'
import { CapabilityError, createLockClient, LockLostError } from '../../../src/index.js'
import { abortedWithin, waitUntil } from '../../support/wait.js'
import { FakeCasStore } from './fake-store.js'

const TTL = 3000

/** One process over the shared store: its own engine and observations. */
function processOn(store: FakeCasStore) {
  const backend = casLeaseBackend(store.view(), { marginMs: 50, pollMaxMs: 100 })
  return createLockClient(backend, { ttl: TTL })
}

/** A released record of `key`, so that a grant is one read and one write, its fence settled at once. */
function releasedRecord(store: FakeCasStore, key: string): void {
  const record = { owner: 'd'.repeat(32), fence: 1n, leaseMs: TTL, state: 'released' as const, nonce: 'n0' }
  store.put(key, encodeRecord(record))
}

const ended = (error: unknown) => {
  assert.ok(error instanceof LockLostError, `expected a LockLostError, got ${error}`)
  assert.match(error.message, /Cannot resume lock "k" on fake-cas:\/\/test: .* acquire the lock anew/)
  return true
}

describe('cas-lease: resume by the store clock', () => {
  it("continues a live lease in another process: same owner and fence; the original's next renewal is lost", async () => {
    const store = new FakeCasStore()
    store.ticking(1_000)
    releasedRecord(store, 'k')
    const first = processOn(store)
    const second = processOn(store)
    // A long lease on the ticking clock: a loaded machine's pause cannot end it before the resume.
    const original = await first.acquire('k', { renew: false, ttl: 30_000 })
    assert.equal(typeof store.json('k')!.notBeforeMs, 'number', 'every write carries the store clock')
    const resumed = await second.resume(original.token())
    assert.deepEqual([resumed.owner, resumed.fence], [original.owner, original.fence])
    await assert.rejects(original.extend(), LockLostError)
    await resumed.extend()
    await resumed.release()
    assert.equal(store.json('k')!.state, 'released')
    await first.close()
    await second.close()
  })

  it("refuses, writing nothing, a lease whose time has passed by the store's clock though nobody took it", async () => {
    const store = new FakeCasStore()
    let now = 1_000
    store.clock = () => now
    releasedRecord(store, 'k')
    const first = processOn(store)
    const original = await first.acquire('k', { renew: false })
    const token = original.token()
    // Written at store second 1000 (at least) with a 3 s lease: a waiter may take it from 1003 on. A resume
    // must be answered before 1002 s less the slack of the front ends' clocks, 1001 s + 1 s at the latest.
    now = 1_002
    const writes = store.count('write')
    const second = processOn(store)
    await assert.rejects(second.resume(token), ended)
    assert.equal(store.count('write'), writes, 'nothing written for a lease past its time')
    assert.equal(store.json('k')!.owner, original.owner, 'the record is left as it was')
    // One second earlier by the store's clock, the same record is live: continued.
    now = 1_001
    const resumed = await second.resume(token)
    assert.equal(resumed.fence, original.fence)
    await resumed.release()
    await first.close()
    await second.close()
  })

  it("refuses a resume whose write was answered past the lease's end, and leaves the record to expire", async () => {
    const store = new FakeCasStore()
    const now = 1_000
    store.clock = (op) => (op === 'replace' && store.count('replace') > 1 ? now + 2 : now)
    releasedRecord(store, 'k')
    const first = processOn(store)
    const original = await first.acquire('k', { renew: false })
    const second = processOn(store)
    // The read shows 1000 (live); the write lands and is answered at 1002: it may have landed after a
    // waiter could have taken the lease over. No handle; the record is not marked released (the original
    // holder's own end may be later than the lower bound the rule counts from).
    await assert.rejects(second.resume(original.token()), ended)
    assert.equal(store.count('replace'), 2, 'the grant, then the resume')
    assert.deepEqual([store.json('k')!.state, store.json('k')!.owner], ['held', original.owner])
    await first.close()
    await second.close()
  })

  it("follows a renewal of the original holder that lands between the resume's read and its write", async () => {
    const store = new FakeCasStore()
    store.ticking(1_000)
    releasedRecord(store, 'k')
    const first = processOn(store)
    const second = processOn(store)
    const original = await first.acquire('k', { renew: false, ttl: 30_000 })
    let open!: () => void
    const gate = new Promise<void>((resolve) => {
      open = resolve
    })
    // The resume's write is held at the store while the original renews: it is refused on the version it
    // read, and written again on the renewed one.
    store.next('replace', { gate })
    const resuming = second.resume(original.token())
    resuming.catch(() => {})
    await waitUntil(() => store.count('replace') === 2, "the resume's write at the store")
    await original.extend()
    open()
    const resumed = await resuming
    assert.equal(resumed.fence, original.fence)
    assert.equal(store.count('replace'), 4, 'grant, held resume write, renewal, resume write again')
    await assert.rejects(original.extend(), LockLostError)
    await resumed.release()
    await abortedWithin(original.signal, 10_000)
    await first.close()
    await second.close()
  })

  it('refuses on a store that shows no clock, which cannot tell a live lease from an ended one', async () => {
    const store = new FakeCasStore()
    releasedRecord(store, 'k')
    const original = await processOn(store).acquire('k', { renew: false })
    const refused = (error: unknown) => {
      assert.ok(error instanceof CapabilityError, `expected a CapabilityError, got ${error}`)
      assert.match(error.message, /shows no clock/)
      return true
    }
    await assert.rejects(processOn(store).resume(original.token()), refused)
    await original.release()
  })
})
