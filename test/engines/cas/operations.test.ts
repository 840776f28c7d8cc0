/**
 * List and break of the cas-lease engine (src/engines/cas/operations.ts) against the in-memory
 * conditional-write store (fake-cas-store.ts): what a listing shows of a held record (and why its
 * `expiresInMs` is only a bound), paging, and a break's conditional write racing a renewal and a new
 * grant, which a real store cannot be made to interleave on purpose.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { casLeaseBackend } from '../../../src/engines/cas/backend.js'
import { decodeRecord, encodeRecord } from '../../../src/engines/cas/record.js'
import { BackendUnavailableError, createLockClient, type ListedLock } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'
import { FakeCasStore } from './fake-store.js'

const DEAD = 'd'.repeat(32)

/** One process over the shared store: its own engine, as another machine would have. */
function processOn(store: FakeCasStore) {
  const backend = casLeaseBackend(store.view(), { marginMs: 50, pollMaxMs: 100 })
  return { backend, client: createLockClient(backend, { ttl: 5000 }) }
}

/** A held record its holder left behind (or still renews, with `nonce` fresh each time). */
function heldRecord(store: FakeCasStore, key: string, fence: bigint, owner = DEAD, nonce = 'n0'): string {
  return store.put(key, encodeRecord({ owner, fence, leaseMs: 60_000, state: 'held', nonce, key }))
}

/** A gate for a write held at the store, and what opens it. */
function gated(): { gate: Promise<void>; open: () => void } {
  let open = () => {}
  const gate = new Promise<void>((resolve) => {
    open = resolve
  })
  return { gate, open }
}

async function listed(list: AsyncIterable<ListedLock>): Promise<ListedLock[]> {
  const found: ListedLock[] = []
  for await (const lock of list) found.push(lock)
  return found.sort((a, b) => (a.key < b.key ? -1 : 1))
}

describe('cas-lease: list', () => {
  it('pages the store, keeps the held records under the prefix, and shows an unreadable one as inspect does', async () => {
    const store = new FakeCasStore()
    const holder = processOn(store)
    const a1 = await holder.client.acquire('a/1', { holder: 'worker 1', renew: false })
    const a2 = await holder.client.acquire('a/2', { renew: false })
    await (await holder.client.acquire('a/3', { renew: false })).release()
    const b1 = await holder.client.acquire('b/1', { renew: false })
    store.put('a/x', 'not a fencelock record')
    const [writes, reads] = [store.count('write'), store.count('read')]

    const operator = processOn(store)
    const found = await listed(operator.client.list('a/'))
    assert.deepEqual(
      found.map((l) => l.key),
      ['a/1', 'a/2', 'a/x'],
    )
    assert.ok(store.pages > 1, `read a page at a time (${store.pages} pages)`)
    assert.equal(store.count('write'), writes, 'a listing writes nothing')
    assert.equal(store.count('read'), reads, 'nor reads records one by one: the listing carries them')
    assert.deepEqual(
      { owner: found[0]!.owner, fence: found[0]!.fence, holder: found[0]!.holder },
      { owner: a1.owner, fence: a1.fence, holder: 'worker 1' },
    )
    for (const lock of found.slice(0, 2)) {
      assert.ok(Number.isInteger(lock.expiresInMs) && lock.expiresInMs! <= 5000, `${lock.expiresInMs}`)
      assert.match(lock.note ?? '', /held unless its holder stopped renewing/)
    }
    assert.equal(found[2]!.held, true)
    assert.match(found[2]!.note ?? '', /not a fencelock record/)
    await Promise.all([a1.release(), a2.release(), b1.release()])
    await holder.client.close()
    await operator.client.close()
  })

  it("counts a lease down from this process's own observation of the record, never below its read", async () => {
    const store = new FakeCasStore()
    heldRecord(store, 'k', 7n)
    const waiter = processOn(store)
    // A fresh reader knows nothing of the record's age: the whole lease, at most.
    const [fresh] = await listed(waiter.client.list(''))
    assert.equal(fresh!.expiresInMs, 60_000)
    // A waiter of this process has seen the same version for a while: that much less.
    assert.equal(await waiter.client.tryAcquire('k'), null)
    await sleep(300)
    const [seen] = await listed(waiter.client.list(''))
    assert.ok(seen!.expiresInMs! <= 60_000 - 300, `${seen!.expiresInMs}`)
    await waiter.client.close()
  })

  it('a listing stopped early reads no further page', async () => {
    const store = new FakeCasStore()
    for (let i = 0; i < 12; i++) heldRecord(store, `k${String(i).padStart(2, '0')}`, 1n)
    const { client } = processOn(store)
    for await (const _ of client.list('')) break
    assert.equal(store.pages, 1)
    await client.close()
  })
})

describe('cas-lease: break', () => {
  it('writes what a release writes, fence kept; a free, released or unknown record is left alone', async () => {
    const store = new FakeCasStore()
    const { client } = processOn(store)
    const lock = await client.acquire('k', { holder: 'stuck', renew: false })
    const writes = store.count('write')
    assert.deepEqual(await client.break('k'), {
      broken: true,
      lease: { owner: lock.owner, fence: lock.fence, holder: 'stuck' },
    })
    const record = decodeRecord(store.records.get('k')!.body)!
    assert.deepEqual([record.state, record.fence, record.owner], ['released', lock.fence, lock.owner])
    assert.equal(store.count('write'), writes + 1, 'one conditional write')
    assert.equal(
      await lock.extend().then(
        () => 'renewed',
        (e: Error) => e.name,
      ),
      'LockLostError',
    )

    assert.deepEqual(await client.break('k'), { broken: false }, 'released: nothing to break')
    assert.deepEqual(await client.break('never'), { broken: false })
    store.put('junk', 'not a fencelock record')
    const refused = await client.break('junk').catch((e: unknown) => e)
    assert.ok(refused instanceof BackendUnavailableError, String(refused))
    assert.match(refused.message, /not a fencelock record.*delete it/)
    assert.equal(store.records.get('junk')?.body, 'not a fencelock record', 'never written over')
    await client.close()
  })

  it('a break whose write loses to a new grant leaves that grant alone, with a fence or without', async () => {
    for (const fence of [5n, undefined]) {
      const store = new FakeCasStore()
      heldRecord(store, 'k', 5n)
      const { gate, open } = gated()
      store.next('write', { gate })
      const { client } = processOn(store)
      const breaking = awaitLater(client.break('k', { fence }))
      await waitUntil(() => store.count('replace') === 1, 'the break to send its write')
      // Meanwhile the lease was taken over (the stuck holder's lease observed to end) by another process.
      heldRecord(store, 'k', 6n, 'n'.repeat(32), 'n1')
      open()
      const result = await breaking
      assert.equal(result.broken, false, `fence ${fence}`)
      assert.equal(result.lease?.fence, 6n)
      assert.equal(decodeRecord(store.records.get('k')!.body)?.state, 'held', 'the new holder keeps it')
      await client.close()
    }
  })

  it('a break whose write loses to a renewal of the same grant breaks it on the next round', async () => {
    const store = new FakeCasStore()
    store.returnCurrent = true
    heldRecord(store, 'k', 5n)
    const { gate, open } = gated()
    store.next('write', { gate })
    const { client } = processOn(store)
    const breaking = awaitLater(client.break('k'))
    await waitUntil(() => store.count('replace') === 1, 'the break to send its write')
    heldRecord(store, 'k', 5n, DEAD, 'renewed')
    open()
    assert.deepEqual(await breaking, { broken: true, lease: { owner: DEAD, fence: 5n, holder: undefined } })
    assert.equal(decodeRecord(store.records.get('k')!.body)?.state, 'released')
    assert.equal(store.count('read'), 1, 'the refusal showed the record: no second read')
    await client.close()
  })

  it('wakes a waiter at its next poll, long before the lease could be taken over', async () => {
    const store = new FakeCasStore()
    heldRecord(store, 'k', 5n)
    const waiter = processOn(store)
    const operator = processOn(store)
    // Its timeout is half the lease: only the break can free the key in time.
    const next = awaitLater(waiter.client.acquire('k', { timeout: 30_000 }))
    await waitUntil(() => store.count('read') >= 2, 'the waiter to poll')
    await operator.client.break('k')
    const lock = await next
    assert.ok(lock.fence > 5n)
    await lock.release()
    await waiter.client.close()
    await operator.client.close()
  })
})
