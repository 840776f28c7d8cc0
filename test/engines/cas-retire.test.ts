/**
 * Retiring released cas-lease records (src/engines/cas-retire.ts, the release in cas-hold.ts) against the
 * in-memory store, whose server clock the test sets: a record goes by a conditional delete only once
 * its fence is below the epoch of a second the store has shown (cas-fence.ts), never earlier, never
 * over someone else's write, and an acquire in the same process cancels a pending retire.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { GRANTS_PER_SECOND_SHIFT } from '../../src/engines/cas-fence.js'
import { casLeaseBackend } from '../../src/engines/cas-lease.js'
import { encodeRecord } from '../../src/engines/cas-record.js'
import { createLockClient } from '../../src/index.js'
import { sleep } from '../support/time.js'
import { waitUntil } from '../support/wait.js'
import { FakeCasStore } from './fake-cas-store.js'

const E = (seconds: number) => BigInt(seconds) << GRANTS_PER_SECOND_SHIFT
/** Longer than two sweeps of the retirer (one a second), generous under load. */
const SWEEPS_MS = 2500

/** A store whose answers show server second `at.now` (the test moves it). */
function storeAt(seconds: number) {
  const store = new FakeCasStore()
  const at = { now: seconds }
  store.clock = () => at.now
  return { store, at }
}

function processOn(store: FakeCasStore) {
  const backend = casLeaseBackend(store.view(), { marginMs: 50, pollMaxMs: 100 })
  return createLockClient(backend, { ttl: 30_000 })
}

describe('cas-lease: released records are retired', () => {
  it('deletes the records of released names once the store clock allows it: none is left', async () => {
    const { store, at } = storeAt(1_000)
    const client = processOn(store)
    for (let i = 0; i < 5; i++) await (await client.acquire(`n${i}`, { renew: false })).release()
    // New records (fence E(1003)) released at second 1000: too early to delete.
    assert.equal(store.records.size, 5)
    at.now = 1_003
    await waitUntil(() => store.records.size === 0, 'every record retired', { withinMs: 10_000 })
    assert.equal(store.count('delete'), 5)
    await client.close()
  })

  it('keeps a new record until the store shows its creation second + 3, and the next grant is greater', async () => {
    const { store, at } = storeAt(1_000)
    const client = processOn(store)
    const first = await client.acquire('k', { renew: false })
    assert.equal(first.fence, E(1_003))
    await first.release()
    at.now = 1_002
    await sleep(SWEEPS_MS)
    assert.equal(store.json('k')?.state, 'released', 'not deleted before the store shows second 1003')
    assert.equal(store.count('delete'), 0)
    at.now = 1_003
    await waitUntil(() => !store.records.has('k'), 'k retired', { withinMs: 10_000 })
    const next = await client.acquire('k', { renew: false })
    assert.ok(next.fence > first.fence, `${next.fence} > ${first.fence}`)
    await next.release()
    await client.close()
  })

  it('makes the release itself the delete when the fence is already below the epoch of a seen second', async () => {
    const { store } = storeAt(1_000)
    store.put(
      'k',
      encodeRecord({ owner: 'd'.repeat(32), fence: E(990), leaseMs: 5000, state: 'released', nonce: 'n0' }),
    )
    const client = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    assert.equal(lock.fence, E(1_000))
    const writes = store.count('write')
    await lock.release()
    assert.deepEqual([store.count('write') - writes, store.count('delete')], [0, 1], 'one delete, no write')
    assert.equal(store.records.has('k'), false)
    const again = await client.acquire('k', { renew: false })
    assert.ok(again.fence > lock.fence, `${again.fence} > ${lock.fence}`)
    await client.close()
  })

  it('a retire racing another client that took the record leaves that grant intact (refused delete)', async () => {
    const { store, at } = storeAt(1_000)
    const a = processOn(store)
    const b = processOn(store)
    const first = await a.acquire('k', { renew: false })
    await first.release()
    const taken = await b.acquire('k', { renew: false })
    assert.ok(taken.fence > first.fence)
    const held = store.records.get('k')!.version
    at.now = 1_003
    await waitUntil(() => store.count('delete') >= 1, "a's retire sent", { withinMs: 10_000 })
    assert.equal(store.records.get('k')?.version, held, "b's record untouched")
    assert.equal(store.json('k')?.state, 'held')
    await taken.release()
    await Promise.all([a.close(), b.close()])
  })

  it('an acquire of the key in the same process cancels its pending retire', async () => {
    const { store, at } = storeAt(1_000)
    const client = processOn(store)
    await (await client.acquire('k', { renew: false })).release()
    const again = await client.acquire('k', { renew: false })
    at.now = 1_003
    await sleep(SWEEPS_MS)
    assert.equal(store.count('delete'), 0, 'no delete sent on the version the acquire wrote over')
    // A renewal's answer shows second 1003: the release is now the delete itself.
    await again.extend()
    await again.release()
    assert.equal(store.records.has('k'), false)
    assert.equal(store.count('delete'), 1)
    await client.close()
  })

  it('a delete whose reply was lost is settled by a read: the lock is released, the record gone', async () => {
    const { store, at } = storeAt(1_000)
    const client = processOn(store)
    const lock = await client.acquire('k', { renew: false })
    at.now = 1_004
    await lock.extend()
    store.next('delete', 'lose-reply')
    await lock.release()
    assert.equal(store.records.has('k'), false)
    assert.equal(store.count('delete'), 1)
    await client.close()
  })

  it('close() sends the retires the store clock allows by then', async () => {
    const { store, at } = storeAt(1_000)
    const client = processOn(store)
    await (await client.acquire('k', { renew: false })).release()
    at.now = 1_003
    await client.close()
    assert.equal(store.records.has('k'), false)
  })

  it('never deletes without a server clock in the answers', async () => {
    const store = new FakeCasStore()
    const client = processOn(store)
    await (await client.acquire('k', { renew: false })).release()
    await sleep(SWEEPS_MS)
    await client.close()
    assert.equal(store.json('k')?.state, 'released')
    assert.equal(store.count('delete'), 0)
  })
})
