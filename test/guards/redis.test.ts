/**
 * The Redis fence guards on a real redis-server, locks from the Redis backend: `guardedSet` refuses a
 * paused holder's late write once the next holder has written, and takes the first write on a new key;
 * fences compare as integers past 2^53 and across digit counts; `redisFenceStore` shares the HTTP
 * guard's last-seen fences between two server instances.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { guardFetchHandler } from '../../src/guards/http.js'
import { guardedSet, readGuarded, redisFenceStore } from '../../src/guards/redis.js'
import { createLockClient, type LockClient } from '../../src/index.js'
import type { KitStore } from '../kits/kit.js'
import { redisKit } from '../kits/redis.js'
import { pausedHolder } from './paused-holder.js'

describe('guards/redis (redis-server)', { timeout: 180_000 }, () => {
  let store: KitStore
  let locks: LockClient
  let redis: Redis
  before(async () => {
    store = await redisKit.start()
    locks = createLockClient(store.url(), { ttl: 1000 })
    redis = new Redis(store.ports[0]!, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 3 })
    await redis.connect()
  })
  after(async () => {
    await locks?.close().catch(() => {})
    redis?.disconnect()
    await store?.close()
  })

  it("guardedSet refuses a paused holder's write once the next holder has written; the first write goes through", async () => {
    const { stale, next } = await pausedHolder(locks, 'config:flags', async (a) => {
      assert.equal(await readGuarded(redis, 'config:flags'), undefined)
      assert.equal(
        await guardedSet(redis, 'config:flags', 'first', a.fence),
        true,
        'the first write on a new key',
      )
      assert.equal(await guardedSet(redis, 'config:flags', 'first, again', a.fence), true, 'more than once')
    })
    assert.equal(await guardedSet(redis, 'config:flags', 'second', next.fence), true)
    assert.equal(
      await guardedSet(redis, 'config:flags', 'stale', stale.fence),
      false,
      'the paused holder is refused',
    )
    assert.deepEqual(await readGuarded(redis, 'config:flags'), { value: 'second', fence: next.fence })
    assert.equal(await redis.hget('config:flags', 'value'), 'second', 'a plain hash, readable with HGET')
    await next.release()
  })

  it('fences compare as integers: past 2^53 by one, and across digit counts (9 < 10, 99 < 100)', async () => {
    const big = 2n ** 53n + 1n
    assert.equal(await guardedSet(redis, 'big', 'newer', big), true)
    assert.equal(await guardedSet(redis, 'big', 'older', big - 1n), false)
    assert.equal(await guardedSet(redis, 'big', 'largest', 2n ** 63n - 1n), true)
    assert.equal(await guardedSet(redis, 'digits', 'ten', 10n), true)
    assert.equal(await guardedSet(redis, 'digits', 'nine', 9n), false)
    assert.equal(await guardedSet(redis, 'digits', 'hundred', 100n), true)
    assert.equal(await guardedSet(redis, 'digits', 'ninety-nine', 99n), false)
    assert.deepEqual(await readGuarded(redis, 'digits'), { value: 'hundred', fence: 100n })
  })

  it('a key holding something else is an error from the server; a bad fence a TypeError', async () => {
    await redis.set('plain', 'x')
    await assert.rejects(guardedSet(redis, 'plain', 'y', 1n), /WRONGTYPE/)
    await assert.rejects(
      guardedSet(redis, 'k', 'y', 1 as never),
      /Expected `fence` to be a lock's fence.*"k"/,
    )
  })

  it('redisFenceStore: a stale holder is refused by another server instance than the one B wrote through', async () => {
    const shared = redisFenceStore(redis)
    let body = 'empty'
    const instance = () =>
      guardFetchHandler({ resource: (r) => new URL(r.url).pathname, store: shared }, async (r) => {
        body = await r.text()
        return new Response('written')
      })
    const [one, two] = [instance(), instance()]
    const put = (handler: typeof one, text: string, fence: bigint) =>
      handler(
        new Request('http://app/report/7', {
          method: 'PUT',
          body: text,
          headers: { 'Fencing-Token': `${fence}` },
        }),
      )
    const { stale, next } = await pausedHolder(locks, 'report:7', async (a) => {
      assert.equal((await put(two, 'first', a.fence)).status, 200)
    })
    assert.equal((await put(one, 'second', next.fence)).status, 200)
    const refused = await put(two, 'stale', stale.fence)
    assert.equal(refused.status, 412)
    assert.match(
      await refused.text(),
      new RegExp(`Fencing-Token ${stale.fence} of /report/7 is older than ${next.fence}`),
    )
    assert.equal(body, 'second')
    assert.equal(await redis.get('fencelock:guard:/report/7'), String(next.fence))
    assert.equal(await shared.advance('/report/7', 2n ** 63n - 1n), 2n ** 63n - 1n)
    assert.equal(await shared.advance('/report/7', 2n ** 63n - 2n), 2n ** 63n - 1n)
    await next.release()
  })
})
