/**
 * The cas-lease engine's election facet (src/engines/cas/election.ts) against the in-memory
 * conditional-write store (fake-store.ts), called as the core calls it: the elections' records kept by
 * their own adapter, the value carried by every write of the hold, a proclaim refused once the record
 * is another's, and a proclaim whose reply was lost but which landed: the next renewal keeps its value.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { AcquireRequest, ElectionFacet, HeldLease } from '../../../src/core/backend.js'
import { casLeaseBackend } from '../../../src/engines/cas/backend.js'
import { encodeRecord } from '../../../src/engines/cas/record.js'
import { FakeCasStore } from './fake-store.js'

const signal = () => AbortSignal.timeout(10_000)

/** A backend over `locks`, with its elections over `elections`, and its election facet. */
function electing(locks: FakeCasStore, elections: FakeCasStore) {
  const backend = casLeaseBackend(locks.view(), { marginMs: 50, pollMaxMs: 100 }, elections.view())
  return { backend, facet: backend.election as ElectionFacet }
}

/** A campaign's one attempt, granted (the store shows no clock: a new record is granted at once). */
async function lead(facet: ElectionFacet, key: string, value: string): Promise<HeldLease> {
  const req: AcquireRequest = { key, owner: `owner-${value}`, ttlMs: 5000, value }
  const out = await facet.tryAcquire(req, signal())
  assert.ok(out.granted, 'the campaign is granted')
  return { key, owner: req.owner, fence: out.fence, cookie: out.cookie }
}

describe('cas-lease: the election facet', () => {
  it("keeps elections in their own adapter's records, the value in each write of the hold", async () => {
    const [locks, elections] = [new FakeCasStore(), new FakeCasStore()]
    const { backend, facet } = electing(locks, elections)
    const lease = await lead(facet, 'e', 'first')
    assert.equal(locks.records.size, 0, 'no record in the locks')
    assert.equal(elections.json('e')!.value, 'first')
    assert.deepEqual(await facet.extend(lease, 5000, signal()), { renewed: true })
    assert.equal(elections.json('e')!.value, 'first', 'a renewal keeps the value')
    const proclaimed = await facet.proclaim(lease, 'second', signal())
    assert.equal(proclaimed.proclaimed, true)
    assert.equal(elections.json('e')!.value, 'second')
    assert.equal((await facet.inspect('e', signal()))?.value, 'second')
    assert.equal(await facet.release({ ...lease, cookie: lease.cookie }, signal()), true)
    assert.equal(elections.json('e')!.state, 'released')
    await backend.close()
  })

  it('refuses a proclaim once the record is another leader’s', async () => {
    const [locks, elections] = [new FakeCasStore(), new FakeCasStore()]
    const { backend, facet } = electing(locks, elections)
    const lease = await lead(facet, 'e', 'old')
    const next = { owner: 'n'.repeat(32), fence: 2n, leaseMs: 5000, state: 'held' as const, nonce: 'x' }
    elections.put('e', encodeRecord({ ...next, value: 'new' }))
    assert.deepEqual(await facet.proclaim(lease, 'stale', signal()), { proclaimed: false })
    assert.equal(elections.json('e')!.value, 'new', 'the new leader keeps its value')
    await backend.close()
  })

  it('a proclaim whose reply was lost but landed: the next renewal keeps the proclaimed value', async () => {
    const [locks, elections] = [new FakeCasStore(), new FakeCasStore()]
    const { backend, facet } = electing(locks, elections)
    const lease = await lead(facet, 'e', 'old')
    // Applied, its reply lost, and the read that would settle it failing too: the outcome is unknown.
    elections.next('replace', 'lose-reply').next('read', 'throw-before')
    await assert.rejects(facet.proclaim(lease, 'new', signal()))
    assert.equal(elections.json('e')!.value, 'new', 'the proclaim landed')
    // Conditioned on the version before the proclaim: refused, found ours, the outcome left unknown.
    await assert.rejects(facet.extend(lease, 5000, signal()))
    assert.deepEqual(await facet.extend(lease, 5000, signal()), { renewed: true })
    assert.equal(elections.json('e')!.value, 'new', 'a renewal put the old value back')
    await backend.close()
  })
})
