/**
 * Retiring released cas-lease records (src/engines/cas/retire.ts, the release in hold.ts) against the
 * in-memory store, whose server clock ticks with the test's: a record goes by a conditional delete once
 * it stayed released for `IDLE_MS`, never over someone else's write, an acquire in the same process
 * cancels a pending retire, and the next grant after a retire is greater (fence.ts).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { casLeaseBackend } from '../../../src/engines/cas/backend.js'
import { IDLE_MS } from '../../../src/engines/cas/retire.js'
import { createLockClient } from '../../../src/index.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'
import { FakeCasStore } from './fake-store.js'

/** Past a pending retire's due time by more than two sweeps of the retirer (one a second), generous under load. */
const DUE_MS = IDLE_MS + 2500
const RETIRED_WITHIN_MS = IDLE_MS + 15_000

/** A store whose answers show a server clock ticking from second 1000. */
function ticking() {
  const store = new FakeCasStore()
  store.ticking(1_000)
  return store
}

function processOn(store: FakeCasStore) {
  const backend = casLeaseBackend(store.view(), { marginMs: 50, pollMaxMs: 100 })
  return createLockClient(backend, { ttl: 30_000 })
}

describe('cas-lease: released records are retired', () => {
  it('deletes the records of released names once they stayed released a while: none is left', async () => {
    const store = ticking()
    const client = processOn(store)
    const fences = new Map<string, bigint>()
    for (let i = 0; i < 5; i++) {
      const lock = await client.acquire(`n${i}`, { renew: false, timeout: 30_000 })
      fences.set(`n${i}`, lock.fence)
      await lock.release()
    }
    await waitUntil(() => store.records.size === 0, 'every record retired', { withinMs: RETIRED_WITHIN_MS })
    assert.equal(store.count('delete'), 5)
    // Made again: above the fence of the record retired.
    const again = await client.acquire('n0', { renew: false, timeout: 30_000 })
    assert.ok(again.fence > fences.get('n0')!, `${again.fence} > ${fences.get('n0')}`)
    await again.release()
    await client.close()
  })

  it('keeps a released record for a while: a name taken again soon costs no new record', async () => {
    const store = ticking()
    const client = processOn(store)
    await (await client.acquire('k', { renew: false, timeout: 30_000 })).release()
    assert.equal(store.json('k')?.state, 'released')
    const creates = store.count('create')
    await (await client.acquire('k', { renew: false })).release()
    assert.equal(store.count('create'), creates, 'the released record was taken, not made again')
    await client.close()
  })

  it('a retire racing another client that took the record leaves that grant intact (refused delete)', async () => {
    const store = ticking()
    const a = processOn(store)
    const b = processOn(store)
    const first = await a.acquire('k', { renew: false, timeout: 30_000 })
    await first.release()
    const taken = await b.acquire('k', { renew: false })
    assert.ok(taken.fence > first.fence)
    const held = store.records.get('k')!.version
    await waitUntil(() => store.count('delete') >= 1, "a's retire sent", { withinMs: RETIRED_WITHIN_MS })
    assert.equal(store.records.get('k')?.version, held, "b's record untouched")
    assert.equal(store.json('k')?.state, 'held')
    await taken.release()
    await Promise.all([a.close(), b.close()])
  })

  it('an acquire of the key in the same process cancels its pending retire', async () => {
    const store = ticking()
    const client = processOn(store)
    await (await client.acquire('k', { renew: false, timeout: 30_000 })).release()
    const again = await client.acquire('k', { renew: false })
    await sleep(DUE_MS)
    assert.equal(store.count('delete'), 0, 'no delete sent on the version the acquire wrote over')
    await again.release()
    await waitUntil(() => !store.records.has('k'), 'retired after its release', {
      withinMs: RETIRED_WITHIN_MS,
    })
    assert.equal(store.count('delete'), 1)
    await client.close()
  })

  it('a delete whose reply was lost is settled by a read: the record is gone', async () => {
    const store = ticking()
    const client = processOn(store)
    await (await client.acquire('k', { renew: false, timeout: 30_000 })).release()
    store.next('delete', 'lose-reply')
    await waitUntil(() => store.count('delete') === 1 && !store.records.has('k'), 'k retired', {
      withinMs: RETIRED_WITHIN_MS,
    })
    await client.close()
  })

  it('close() sends every pending retire at once', async () => {
    const store = ticking()
    const client = processOn(store)
    await (await client.acquire('k', { renew: false, timeout: 30_000 })).release()
    assert.equal(store.records.has('k'), true)
    await client.close()
    assert.equal(store.records.has('k'), false)
  })

  it('never deletes without a server clock in the answers', async () => {
    const store = new FakeCasStore()
    const client = processOn(store)
    await (await client.acquire('k', { renew: false })).release()
    await client.close()
    assert.equal(store.json('k')?.state, 'released')
    assert.equal(store.count('delete'), 0)
  })
})
