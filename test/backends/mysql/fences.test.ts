/**
 * MySQL/MariaDB fences outlive the lock's own row, on a real MariaDB 10.11: an operator who deletes a row
 * (DELETE) or every row (TRUNCATE) between grants, or under a holder, never makes a fence go back (the
 * fence comes from the server's clock when the row is made again). Through the kit's `deleteState` hook.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import type { KitStore } from '../../kits/kit.js'
import { mysqlKit } from '../../kits/mysql.js'
import { abortedWithin } from '../../support/wait.js'

describe('mysql (MariaDB 10.11): fences after deleted rows', { timeout: 120_000 }, () => {
  let store: KitStore
  let locks: LockClient
  before(async () => {
    store = await mysqlKit.start()
    locks = createLockClient(store.url(), { ttl: '5s' })
  })
  after(async () => {
    await locks?.close().catch(() => {})
    await store?.close()
  })

  for (const how of ['DELETE', 'TRUNCATE'] as const) {
    it(`a ${how} between grants: the next fence is larger`, async () => {
      const key = `deleted-${how}`
      let last = 0n
      for (let round = 0; round < 3; round++) {
        const lock = await locks.acquire(key, { timeout: '10s' })
        assert.ok(lock.fence > last, `${how} round ${round}: fence ${lock.fence} after ${last}`)
        last = lock.fence
        await lock.release()
        await store.deleteState!(how === 'DELETE' ? key : undefined)
      }
    })
  }

  it('a row deleted under its holder: the holder loses it, the next grant has a larger fence', async () => {
    const holder = createLockClient(store.url(), { ttl: '2s' })
    try {
      const lock = await holder.acquire('deleted-held')
      await store.deleteState!('deleted-held')
      // The next grant takes the missing row at once (nobody holds it as far as the table knows).
      const next = await locks.acquire('deleted-held', { timeout: '10s' })
      assert.ok(next.fence > lock.fence, `fence ${next.fence} after ${lock.fence}`)
      // The holder's renewal finds the row not its own: lost.
      assert.ok((await abortedWithin(lock.signal, 15_000)) instanceof LockLostError)
      await next.release()
    } finally {
      await holder.close()
    }
  })
})
