/**
 * list and break on the cas-lease stores (S3, GCS, DynamoDB), where the conformance case does not reach:
 * a listing over many pages of the store (a page size set low through the driver), keys whose object
 * names are hashes (a '/', a space, non-ASCII letters, a long key) given back exactly, the store's own
 * prefix respected, and a break waking waiters that could not otherwise have the lock for a whole lease.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import * as s3sdk from '@aws-sdk/client-s3'
import { Storage } from '@google-cloud/storage'
import { DynamoDbCasAdapter } from '../../../src/backends/dynamodb/index.js'
import { GcsCasAdapter } from '../../../src/backends/gcs/index.js'
import { S3CasAdapter } from '../../../src/backends/s3/index.js'
import type { CasAdapter } from '../../../src/engines/cas/adapter.js'
import { casLeaseBackend } from '../../../src/engines/cas/backend.js'
import { BackendUnavailableError, createLockClient, type Lock, type LockClient } from '../../../src/index.js'
import { dynamodbKit, TABLE } from '../../kits/dynamodb.js'
import { gcsKit } from '../../kits/gcs.js'
import type { Kit, KitStore } from '../../kits/kit.js'
import { s3Kit } from '../../kits/s3.js'
import { localClient } from '../../servers/dynamodb.js'
import { awaitLater } from '../../support/later.js'

/** Records per page of the listing under test: 250 locks span several. */
const PAGE = 40
/**
 * The lease of the locks a listing must show: longer than a loaded machine takes to set up 250 of them
 * (past a minute at load 20), so every one is still held when the listing runs.
 */
const LISTED_LEASE = '30m'
const BUCKET = 'fencelock-tests'

interface Subject {
  readonly kit: Kit
  /** A driver of the kit's store whose listings come `PAGE` records at a time. */
  readonly pagedDriver: (endpoint: string) => CasAdapter
  /** The kit's URL with another object prefix (S3, GCS); DynamoDB's namespace is its table. */
  readonly otherPrefix?: (url: string) => string
}

const SUBJECTS: readonly Subject[] = [
  {
    kit: s3Kit,
    pagedDriver: (endpoint) =>
      new S3CasAdapter({
        client: new s3sdk.S3Client({
          endpoint,
          forcePathStyle: true,
          region: 'us-east-1',
          credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
        }),
        bucket: BUCKET,
        prefix: 'fencelock/',
        id: 's3 paged',
        owned: true,
        sdk: async () => s3sdk,
        pageSize: PAGE,
      }),
    otherPrefix: (url) => url.replace(`${BUCKET}/?`, `${BUCKET}/other?`),
  },
  {
    kit: gcsKit,
    pagedDriver: (endpoint) =>
      new GcsCasAdapter({
        storage: new Storage({ apiEndpoint: endpoint, projectId: BUCKET }),
        bucket: BUCKET,
        prefix: 'fencelock/',
        id: 'gcs paged',
        pageSize: PAGE,
      }),
    otherPrefix: (url) => url.replace(`${BUCKET}/?`, `${BUCKET}/other?`),
  },
  {
    kit: dynamodbKit,
    pagedDriver: (endpoint) =>
      new DynamoDbCasAdapter(
        {
          client: localClient(endpoint),
          table: TABLE,
          createTable: false,
          id: 'dynamodb paged',
          owned: true,
          pageSize: PAGE,
        },
        () => import('@aws-sdk/client-dynamodb'),
      ),
  },
]

/** Listings a loaded machine may leave unanswered (each page of the store bounded at 5 s) before one fails. */
const LISTINGS_TRIED = 3

/**
 * The keys `client` lists under `prefix`, sorted. A listing only reads: one whose page went unanswered in
 * its bound (a loaded machine) is tried again from the start, a few times at most.
 */
async function keysOf(client: LockClient, prefix?: string): Promise<string[]> {
  for (let tried = 1; ; tried++) {
    try {
      const keys: string[] = []
      for await (const lock of client.list(prefix)) keys.push(lock.key)
      return keys.sort()
    } catch (error) {
      if (!(error instanceof BackendUnavailableError) || tried === LISTINGS_TRIED) throw error
    }
  }
}

for (const { kit, pagedDriver, otherPrefix } of SUBJECTS) {
  describe(`${kit.id}: list and break`, { timeout: 300_000 }, () => {
    let store: KitStore
    let client: LockClient
    let paged: LockClient

    before(async () => {
      store = await kit.start()
      const endpoint = new URL(store.url()).searchParams.get('endpoint')!
      client = createLockClient(store.url(), { ttl: '60s' })
      paged = createLockClient(casLeaseBackend(pagedDriver(endpoint)))
    })
    after(async () => {
      await client?.close()
      await paged?.close()
      await store?.close()
    })

    it('lists 250 held locks over several pages of the store, and no released or other one', async () => {
      const keys = Array.from({ length: 250 }, (_, i) => `many/${String(i).padStart(3, '0')}`)
      const held: Lock[] = []
      // In batches: the store serves the other tests of this machine too. Large ones: each batch of new
      // records waits 1-2 s for the store's clock before its grants, however many it holds.
      for (let i = 0; i < keys.length; i += 125) {
        const batch = keys
          .slice(i, i + 125)
          .map((key) => client.acquire(key, { renew: false, ttl: LISTED_LEASE }))
        held.push(...(await Promise.all(batch)))
      }
      const released = await client.acquire('many/released', { renew: false, ttl: LISTED_LEASE })
      await released.release()
      const beside = await client.acquire('manybeside', { renew: false, ttl: LISTED_LEASE })
      const expired = held.filter((lock) => lock.validUntil <= performance.now()).map((lock) => lock.key)
      assert.deepEqual(expired, [], 'leases ran out before the listing: it rightly leaves them out')

      assert.deepEqual(await keysOf(paged, 'many/'), keys)
      const all = await keysOf(paged)
      assert.ok(keys.every((k) => all.includes(k)) && all.includes('manybeside'), 'list() finds them all')
      assert.ok(!all.includes('many/released'))
      for (let i = 0; i < held.length; i += 25) {
        await Promise.all(held.slice(i, i + 25).map((lock) => lock.release()))
      }
      await beside.release()
      assert.deepEqual(await keysOf(paged, 'many'), [])
    })

    it('gives back keys as they were given, hashed object names included', async () => {
      const keys = ['enc/a b/ä', 'enc/plain', 'enc/~tilde', 'enc/日本', `enc/${'x'.repeat(300)}`]
      const held = await Promise.all(keys.map((key) => client.acquire(key, { renew: false })))
      assert.deepEqual(await keysOf(paged, 'enc/'), [...keys].sort())
      assert.deepEqual(await keysOf(paged, 'enc/a b'), ['enc/a b/ä'], 'a prefix with a space')
      assert.deepEqual(await keysOf(paged, 'enc/pl'), ['enc/plain'], 'a plain prefix')
      assert.deepEqual(await keysOf(paged, 'enc/~'), ['enc/~tilde'])
      assert.deepEqual(await keysOf(paged, 'enc/日'), ['enc/日本'])
      if (otherPrefix) {
        // Another object prefix is another namespace: neither lists the other's locks.
        const other = createLockClient(otherPrefix(store.url()), { ttl: '60s' })
        try {
          const there = await other.acquire('enc/there', { renew: false })
          assert.deepEqual(await keysOf(other, 'enc/'), ['enc/there'])
          assert.ok(!(await keysOf(client, 'enc/')).includes('enc/there'))
          await there.release()
        } finally {
          await other.close()
        }
      }
      await Promise.all(held.map((lock) => lock.release()))
    })

    it('a break wakes the waiters, which could not otherwise have the lock before its 60 s lease ends', async () => {
      const waiters = createLockClient(store.url(), { ttl: kit.capabilities.minTtlMs * 3 })
      try {
        const stuck = await client.acquire('woken', { holder: 'stuck' })
        // Their timeouts end before the lease could be observed to end: only the break frees it.
        const waiting = [1, 2, 3].map(() => awaitLater(waiters.acquire('woken', { timeout: '40s' })))
        const broken = await paged.break('woken')
        assert.equal(broken.lease?.fence, stuck.fence)
        let fence = stuck.fence
        // In the order they are granted: each releases at once, and the next is granted.
        const pending = new Set(waiting)
        while (pending.size > 0) {
          const { lock, from } = await Promise.race(
            [...pending].map((from) => from.then((lock) => ({ lock, from }))),
          )
          pending.delete(from)
          assert.ok(lock.fence > fence, `fence ${lock.fence} after ${fence}`)
          fence = lock.fence
          await lock.release()
        }
        await stuck.release().catch(() => {})
      } finally {
        await waiters.close()
      }
    })
  })
}
