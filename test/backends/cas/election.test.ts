/**
 * Leader election on the cas-lease stores (S3, GCS, DynamoDB), for what the conformance cases cannot see:
 * the record on the store (read and written with the store's own client), the elections' namespace apart
 * from the locks' (a lock and an election of one name, a listing of locks), a proclaim after a takeover
 * refused on the store, the two vacancies an observer reads where the mutex's view says held (a leader
 * that stopped renewing, once seen unchanged for its lease plus the margin, and a new record whose grant
 * still waits for the store's clock), a campaign on a new name granted over its two attempts, and a term
 * after the record was retired. No watch to test: these stores cannot notify.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { GetItemCommand, PutItemCommand } from '@aws-sdk/client-dynamodb'
import * as s3 from '@aws-sdk/client-s3'
import { Storage } from '@google-cloud/storage'
import { electionItemKey } from '../../../src/backends/dynamodb/index.js'
import { electionObjectName } from '../../../src/backends/gcs/layout.js'
import { electionObjectKey } from '../../../src/backends/s3/layout.js'
import { decodeRecord, encodeRecord } from '../../../src/engines/cas/record.js'
import { IDLE_MS } from '../../../src/engines/cas/retire.js'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { dynamodbKit } from '../../kits/dynamodb.js'
import { gcsKit } from '../../kits/gcs.js'
import type { Kit, KitStore } from '../../kits/kit.js'
import { s3Kit } from '../../kits/s3.js'
import { localClient } from '../../servers/dynamodb.js'
import { pollUntil, waitUntil } from '../../support/wait.js'

/** A generous liveness bound on a loaded machine, never a speed claim. */
const WITHIN = { withinMs: 60_000, everyMs: 50 }

/** The record of an election as the store's own client reads and writes it (the body: the engine's text). */
interface RawElections {
  read(name: string): Promise<string | undefined>
  /** Writes `body` as the election's record, unconditionally (as a program that is not fencelock would). */
  write(name: string, body: string): Promise<void>
  close(): void
}

const endpointOf = (url: string) => decodeURIComponent(/endpoint=([^&]+)/.exec(url)![1]!)
const BUCKET = 'fencelock-tests'

const RAW: Record<string, (url: string) => RawElections> = {
  s3: (url) => {
    const client = new s3.S3Client({ endpoint: endpointOf(url), forcePathStyle: true, region: 'us-east-1' })
    return {
      async read(name) {
        try {
          const out = await client.send(
            new s3.GetObjectCommand({ Bucket: BUCKET, Key: electionObjectKey(name) }),
          )
          return await out.Body!.transformToString('utf8')
        } catch (error) {
          if ((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404)
            return undefined
          throw error
        }
      },
      async write(name, body) {
        await client.send(
          new s3.PutObjectCommand({ Bucket: BUCKET, Key: electionObjectKey(name), Body: body }),
        )
      },
      close: () => client.destroy(),
    }
  },
  gcs: (url) => {
    const bucket = new Storage({ apiEndpoint: endpointOf(url), projectId: 'fencelock-tests' }).bucket(BUCKET)
    return {
      async read(name) {
        const file = bucket.file(electionObjectName(name))
        const [exists] = await file.exists()
        return exists ? (await file.download())[0].toString('utf8') : undefined
      },
      async write(name, body) {
        await bucket.file(electionObjectName(name)).save(body)
      },
      close: () => {},
    }
  },
  dynamodb: (url) => {
    const client = localClient(endpointOf(url))
    const table = /^dynamodb:\/\/([^?]+)/.exec(url)![1]!
    return {
      async read(name) {
        const out = await client.send(
          new GetItemCommand({ TableName: table, Key: electionItemKey(name), ConsistentRead: true }),
        )
        return out.Item?.record?.S
      },
      async write(name, body) {
        const Item = { ...electionItemKey(name), record: { S: body }, version: { S: `raw-${Date.now()}` } }
        await client.send(new PutItemCommand({ TableName: table, Item }))
      },
      close: () => client.destroy(),
    }
  },
}

function electionSuite(kit: Kit): void {
  describe(`${kit.id}: election records`, { timeout: 300_000 }, () => {
    const ttl = Math.max(kit.capabilities.minTtlMs, 2000)
    let store: KitStore
    let raw: RawElections
    const clients: LockClient[] = []
    const client = (options: Parameters<typeof createLockClient>[1] = {}) => {
      const made = createLockClient(store.url(), { ttl: '20s', ...options })
      clients.push(made)
      return made
    }
    before(async () => {
      store = await kit.start()
      raw = RAW[kit.backend]!(store.url())
    })
    after(async () => {
      await Promise.all(clients.map((c) => c.close()))
      raw?.close()
      await store?.close()
    })

    it('an election and a lock of one name are apart; the record holds the value; lock lists skip it', async () => {
      const locks = client()
      const lead = await locks.election('apart').campaign({ value: 'http://[::1]:8080/é 🗳' })
      // The lock of the same name is free: no election's record is in its way.
      const lock = await locks.acquire('apart', { timeout: 0 })
      const record = decodeRecord((await raw.read('apart')) ?? '')
      assert.ok(record, 'the election has a record of its own on the store')
      assert.equal(record.owner, lead.owner)
      assert.equal(record.fence, lead.term)
      assert.equal(record.value, 'http://[::1]:8080/é 🗳')
      assert.equal(record.state, 'held')
      const listed: string[] = []
      for await (const held of locks.list('')) listed.push(`${held.key} ${held.owner}`)
      assert.deepEqual(
        listed,
        [`apart ${lock.owner}`],
        'a listing of locks shows the lock, never the election',
      )
      await lock.release()
      assert.ok((await locks.election('apart').leader()).leader, 'releasing the lock leaves the leader')
      await lead.resign()
    })

    it('a campaign on a new name is granted over its two attempts, also with timeout 0', async () => {
      // A new record: a placeholder, then the grant once the store's clock settles its term (engine.ts).
      // The core gives that second attempt its time past the timeout (`pending`).
      const lead = await client().election('new-name').campaign({ value: 'first', timeout: 0 })
      const record = decodeRecord((await raw.read('new-name')) ?? '')
      assert.ok(record && record.state === 'held' && record.fresh === undefined, 'the grant is on the store')
      assert.equal(record.fence, lead.term)
      const view = await client().election('new-name').leader()
      assert.ok(view.leader && view.owner === lead.owner && view.value === 'first')
      await lead.resign()
    })

    it("a resigned election's record is retired; the next term is still greater", async () => {
      const leaders = client()
      const first = await leaders.election('retired').campaign({ value: 'one' })
      await first.resign()
      // The retirer deletes the released record once it has stayed released for IDLE_MS.
      await waitUntil(async () => (await raw.read('retired')) === undefined, 'the record retired', {
        withinMs: IDLE_MS + 30_000,
      })
      const seen = await client().election('retired').leader()
      assert.equal(seen.leader, false, 'nobody leads a retired election')
      const next = await client().election('retired').campaign({ value: 'two' })
      assert.ok(next.term > first.term, `term ${next.term} after a retire, ${first.term} before`)
      await next.resign()
    })

    it('a proclaim after a takeover is refused on the store: the new leader keeps its value', async () => {
      const stale = client({ ttl, renew: false })
      const old = await stale.election('taken').campaign({ value: 'old' })
      const next = await client().election('taken').campaign({ value: 'new', timeout: '60s' })
      assert.ok(next.term > old.term)
      await assert.rejects(old.proclaim('stale'), LockLostError)
      const record = decodeRecord((await raw.read('taken')) ?? '')
      assert.ok(record, 'the election has a record')
      assert.equal(record.value, 'new')
      assert.equal(record.owner, next.owner)
      await next.resign()
    })

    it("renewals keep the leader's value: the campaign's, then the proclaimed one", async () => {
      const lead = await client({ ttl }).election('renewed').campaign({ value: 'first' })
      const written = async (value: string) => {
        const at = decodeRecord((await raw.read('renewed')) ?? '')
        assert.ok(at, 'the election has a record')
        assert.equal(at.value, value)
        // The next write of the hold (a renewal, every ttl/3) has a new nonce: read until one lands.
        const renewed = await pollUntil(
          async () => decodeRecord((await raw.read('renewed')) ?? ''),
          (r) => r?.nonce !== at.nonce,
          WITHIN,
        )
        assert.ok(renewed && renewed.nonce !== at.nonce, 'no renewal was written')
        assert.equal(renewed.value, value, 'a renewal dropped the value')
      }
      await written('first')
      await lead.proclaim('second')
      await written('second')
      await lead.resign()
    })

    it('a killed leader: observers see a vacancy after its lease plus the margin, with no candidate', async () => {
      // What a leader killed mid-term leaves: its held record, never renewed nor released.
      const killed = { owner: 'killed-leader', fence: 41n, leaseMs: ttl, state: 'held' as const, nonce: 'k1' }
      await raw.write('dead', encodeRecord({ ...killed, key: 'dead', value: 'gone' }))
      const watcher = client().election('dead')
      const seen = await watcher.leader()
      assert.ok(
        seen.leader && seen.owner === killed.owner && seen.value === 'gone',
        'the leader is seen first',
      )
      // Nobody campaigns: only the observation (the same version for its lease plus the margin) ends it.
      const view = await pollUntil(
        () => watcher.leader(),
        (v) => !v.leader,
        WITHIN,
      )
      assert.equal(view.leader, false, 'a killed leader is seen leading forever')
      assert.equal(view.term, killed.fence, 'the vacancy names the last term')
      // The record is still the killed leader's (nobody wrote): a candidate takes it with a greater term.
      const next = await client().election('dead').campaign({ timeout: '60s' })
      assert.ok(next.term > killed.fence)
      await next.resign()
    })

    it('a new record whose grant still waits for the store clock is no leader yet', async () => {
      // What a campaign on a new name leaves between its placeholder and its grant (engine.ts).
      const placeholder = encodeRecord({
        owner: 'waiting-candidate',
        fence: 7n,
        leaseMs: 60_000,
        state: 'held',
        nonce: 'n1',
        key: 'settling',
        fresh: true,
        value: 'not yet',
      })
      await raw.write('settling', placeholder)
      const view = await client().election('settling').leader()
      assert.equal(
        view.leader,
        false,
        `a placeholder is shown as a leader: ${JSON.stringify(view, (_, v) => String(v))}`,
      )
    })

    if (kit.backend === 'dynamodb') {
      it("a lock name starting with NUL is refused before any I/O: the elections' items live there", async () => {
        const locks = client()
        await assert.rejects(locks.acquire('\u0000election/x'), TypeError)
        await assert.rejects(locks.inspect('\u0000x'), TypeError)
        // The election of that name is another item: its name may start with anything.
        const lead = await locks.election('\u0000x').campaign()
        await lead.resign()
      })
    }
  })
}

electionSuite(s3Kit)
electionSuite(gcsKit)
electionSuite(dynamodbKit)
