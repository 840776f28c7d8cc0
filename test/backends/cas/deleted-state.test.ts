/**
 * Fences outlive deleted lock state on the cas-lease stores (S3, GCS, DynamoDB), each through its kit's
 * `deleteState` as an operator would delete it (a record, every record under the prefix or in the table, the
 * DynamoDB table made again): the next grant's fence is above every earlier one, whether the deleted record
 * was released or still held. The guarantee covers records deleted at any age, also within the second of
 * their creation (src/engines/cas/fence.ts): the tests delete right after the grant.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { dynamodbKit, remakeTable } from '../../kits/dynamodb.js'
import { gcsKit } from '../../kits/gcs.js'
import type { Kit, KitStore } from '../../kits/kit.js'
import { s3Kit } from '../../kits/s3.js'
import { localClient } from '../../servers/dynamodb.js'

function deletedStateSuite(kit: Kit, extra?: (store: () => KitStore) => void): void {
  describe(`${kit.id}: fences after deleted lock state`, { timeout: 180_000 }, () => {
    let store: KitStore
    let locks: LockClient
    before(async () => {
      store = await kit.start()
      locks = createLockClient(store.url(), { ttl: '10s' })
    })
    after(async () => {
      await locks?.close()
      await store?.close()
    })

    it("a released lock's record deleted: the next grant's fence is higher", async () => {
      const first = await locks.acquire('deleted/released')
      await first.release()
      await store.deleteState!('deleted/released')
      const second = await locks.acquire('deleted/released')
      assert.ok(second.fence > first.fence, `${second.fence} > ${first.fence}`)
      await second.release()
    })

    it("a held lock's record deleted: the next holder's fence is higher", async () => {
      const held = await locks.acquire('deleted/held', { renew: false })
      await store.deleteState!('deleted/held')
      const other = createLockClient(store.url(), { ttl: '10s' })
      try {
        const next = await other.acquire('deleted/held', { timeout: '20s' })
        assert.ok(next.fence > held.fence, `${next.fence} > ${held.fence}`)
        await next.release()
      } finally {
        await other.close()
      }
      // The old holder learns it lost the lock: its record is another's now.
      await assert.rejects(held.extend())
    })

    it('every record deleted (the whole prefix or table): every next fence is higher', async () => {
      const keys = ['all/a', 'all/b', 'all/c']
      const before = new Map<string, bigint>()
      for (const key of keys) {
        const lock = await locks.acquire(key)
        before.set(key, lock.fence)
        await lock.release()
      }
      await store.deleteState!()
      for (const key of keys) {
        const lock = await locks.acquire(key)
        assert.ok(lock.fence > before.get(key)!, `${key}: ${lock.fence} > ${before.get(key)}`)
        await lock.release()
      }
    })

    extra?.(() => store)
  })
}

deletedStateSuite(s3Kit)
deletedStateSuite(gcsKit)
deletedStateSuite(dynamodbKit, (store) => {
  it('the table dropped and made again: the next fence is higher', async () => {
    const locks = createLockClient(store().url(), { ttl: '10s' })
    const endpoint = /endpoint=([^&]+)/.exec(store().url())![1]!
    const admin = localClient(endpoint)
    try {
      const first = await locks.acquire('remade/table')
      await first.release()
      await remakeTable(admin)
      const second = await locks.acquire('remade/table')
      assert.ok(second.fence > first.fence, `${second.fence} > ${first.fence}`)
      await second.release()
    } finally {
      await locks.close()
      admin.destroy()
    }
  })
})
