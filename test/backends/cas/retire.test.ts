/**
 * Released lock records are retired on the real cas-lease stores (S3 and GCS test servers, DynamoDB
 * Local): the store keeps nothing for a name once its lock is released and not taken again for a few
 * seconds (src/engines/cas/retire.ts), a retire never removes a grant another client made meanwhile, and
 * the next grant after a retire has a greater fence. `inspect` tells a retired name (nothing stored:
 * `{ held: false }` without a fence) from a released record (`{ held: false, fence }`).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { IDLE_MS } from '../../../src/engines/cas/retire.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { dynamodbKit } from '../../kits/dynamodb.js'
import { gcsKit } from '../../kits/gcs.js'
import type { Kit, KitStore } from '../../kits/kit.js'
import { s3Kit } from '../../kits/s3.js'
import { waitUntil } from '../../support/wait.js'

/** A released record stays `IDLE_MS`, then the retirer's next sweep deletes it; generous under load. */
const RETIRED_WITHIN_MS = IDLE_MS + 20_000

function retireSuite(kit: Kit): void {
  describe(`${kit.id}: released records are retired`, { timeout: 180_000 }, () => {
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

    const retired = async (key: string) => {
      const info = await locks.inspect(key)
      return !info.held && info.fence === undefined
    }

    it('names acquired and released leave no record; the next grant has a greater fence', async () => {
      const keys = ['retire/a', 'retire/b', 'retire/c']
      // The keys side by side: each one's new record waits 1-2 s for the store's clock, and its release
      // for the store's write rate (GCS), which one after another would add up.
      const fences = new Map<string, bigint>()
      await Promise.all(
        keys.map(async (key) => {
          const lock = await locks.acquire(key)
          fences.set(key, lock.fence)
          await lock.release()
        }),
      )
      for (const key of keys)
        await waitUntil(() => retired(key), `${key} retired`, { withinMs: RETIRED_WITHIN_MS })
      await Promise.all(
        keys.map(async (key) => {
          const lock = await locks.acquire(key)
          assert.ok(lock.fence > fences.get(key)!, `${key}: ${lock.fence} > ${fences.get(key)}`)
          await lock.release()
        }),
      )
    })

    it("a pending retire never removes another client's grant; that one is retired after its release", async () => {
      const other = createLockClient(store.url(), { ttl: '10s' })
      try {
        const first = await locks.acquire('retire/race')
        await first.release()
        // Taken by another process before the first one's retire is due: that retire is refused.
        const taken = await other.acquire('retire/race', { renew: false, timeout: '10s' })
        assert.ok(taken.fence > first.fence)
        await waitUntil(async () => (await locks.inspect('retire/race')).held, 'the grant seen', {
          withinMs: 5000,
        })
        // Past the moment the first retire was due (IDLE_MS after its release), and its sweep.
        await new Promise((resolve) => setTimeout(resolve, IDLE_MS + 3000))
        const info = await locks.inspect('retire/race')
        assert.equal(info.held, true, 'the other client still holds it')
        assert.equal(info.fence, taken.fence)
        await taken.release()
        await waitUntil(() => retired('retire/race'), 'retired after release', {
          withinMs: RETIRED_WITHIN_MS,
        })
      } finally {
        await other.close()
      }
    })
  })
}

retireSuite(s3Kit)
retireSuite(gcsKit)
retireSuite(dynamodbKit)
