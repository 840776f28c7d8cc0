/**
 * The bench's adapters on the conditional-write stores (S3, GCS, DynamoDB): a hand-written floor per store
 * and, where one exists, a peer (`dynamodb-lock-client` for DynamoDB). A floor is the least work the store
 * allows for an uncontended cycle: one conditional write that takes the lock (a create the first time, then
 * a replace of the version this client itself last wrote, so no read is needed) and one conditional
 * replace that releases it. No fence, no lease, never waits. Floors and the peer use prefixes or tables of
 * their own, so their objects never meet fencelock's.
 */
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import * as ddb from '@aws-sdk/client-dynamodb'
import * as s3 from '@aws-sdk/client-s3'
import { DynamoDBDocument } from '@aws-sdk/lib-dynamodb'
import { Storage } from '@google-cloud/storage'
import DynamoDBLockClient from 'dynamodb-lock-client'
import type { Adapter, Env } from './adapter.js'

const TTL = 30_000
/** What the bench's kits use (test/kits/{s3,gcs}.ts): the bucket both fake servers were given. */
const BUCKET = 'fencelock-tests'
const REGION = 'us-east-1'
const FLOOR_PREFIX = 'bench-floor/'

const endpoint = (env: Env, store: string): string => {
  const url = env.endpoints[store]
  if (url === undefined) throw new Error(`no ${store} store was started`)
  return url
}

/** The version this client last wrote of each key: uncontended, it is the current one, so no read. */
type Versions = Map<string, string>

const s3Floor: Adapter = {
  name: 'raw floor: s3 PutObject If-None-Match / If-Match',
  store: 's3',
  kind: 'floor',
  fences: false,
  waits: false,
  note: 'two PutObject per cycle (If-None-Match: * or If-Match the ETag it last wrote; release If-Match), no read, no fence',
  async createLocker(env) {
    const client = new s3.S3Client({ endpoint: endpoint(env, 's3'), forcePathStyle: true, region: REGION })
    const versions: Versions = new Map()
    const put = async (key: string, body: string, condition: { IfNoneMatch: '*' } | { IfMatch: string }) => {
      const out = await client.send(
        new s3.PutObjectCommand({ Bucket: BUCKET, Key: FLOOR_PREFIX + key, Body: body, ...condition }),
      )
      versions.set(key, out.ETag!)
    }
    return {
      async acquire(key) {
        const known = versions.get(key)
        await put(key, 'held', known === undefined ? { IfNoneMatch: '*' } : { IfMatch: known })
        return { release: () => put(key, 'released', { IfMatch: versions.get(key)! }) }
      },
      close: async () => client.destroy(),
    }
  },
}

/**
 * GCS takes about one write per second per object (its documented rate; the real service answers 429
 * beyond it, the test server does not enforce it unless asked): the floor keeps to it as fencelock's GCS
 * driver does (`minWriteIntervalMs`), else it would measure a rate GCS refuses.
 */
const GCS_WRITE_INTERVAL_MS = 1000

const gcsFloor: Adapter = {
  name: 'raw floor: gcs upload ifGenerationMatch',
  store: 'gcs',
  kind: 'floor',
  fences: false,
  waits: false,
  note: 'two single-request uploads per cycle (ifGenerationMatch 0 or the generation it last wrote; release the same), no read, no fence; at most one write per second per object, as GCS allows',
  async createLocker(env) {
    const storage = new Storage({ apiEndpoint: endpoint(env, 'gcs'), projectId: BUCKET })
    const bucket = storage.bucket(BUCKET)
    const versions: Versions = new Map()
    const wroteAt = new Map<string, number>()
    const upload = async (key: string, body: string) => {
      const last = wroteAt.get(key)
      if (last !== undefined) {
        const wait = last + GCS_WRITE_INTERVAL_MS - performance.now()
        if (wait > 0) await sleep(wait)
      }
      const file = bucket.file(FLOOR_PREFIX + key)
      await file.save(body, {
        resumable: false,
        validation: false,
        preconditionOpts: { ifGenerationMatch: versions.get(key) ?? 0 },
      })
      wroteAt.set(key, performance.now())
      versions.set(key, String(file.metadata.generation))
    }
    return {
      async acquire(key) {
        await upload(key, 'held')
        return { release: () => upload(key, 'released') }
      },
      close: async () => {},
    }
  },
}

/**
 * A client of the bench's DynamoDB, after creating `table` (string hash key `key`) unless it exists;
 * DynamoDB Local makes it ACTIVE at once.
 */
async function tableClient(env: Env, table: string, key: string): Promise<ddb.DynamoDBClient> {
  const client = new ddb.DynamoDBClient({ endpoint: endpoint(env, 'dynamodb'), region: REGION })
  try {
    await client.send(
      new ddb.CreateTableCommand({
        TableName: table,
        AttributeDefinitions: [{ AttributeName: key, AttributeType: 'S' }],
        KeySchema: [{ AttributeName: key, KeyType: 'HASH' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    )
  } catch (error) {
    if ((error as Error).name !== 'ResourceInUseException') throw error
  }
  return client
}

const dynamodbFloor: Adapter = {
  name: 'raw floor: dynamodb conditional PutItem',
  store: 'dynamodb',
  kind: 'floor',
  fences: false,
  waits: false,
  note: 'two PutItem per cycle (attribute_not_exists or the version it last wrote; release the same), no read, no fence',
  async createLocker(env) {
    const table = 'bench-floor'
    const client = await tableClient(env, table, 'pk')
    const versions: Versions = new Map()
    const put = async (key: string, state: string) => {
      const known = versions.get(key)
      const version = randomBytes(8).toString('hex')
      await client.send(
        new ddb.PutItemCommand({
          TableName: table,
          Item: { pk: { S: key }, state: { S: state }, version: { S: version } },
          ConditionExpression: known === undefined ? 'attribute_not_exists(pk)' : 'version = :v',
          ...(known === undefined ? {} : { ExpressionAttributeValues: { ':v': { S: known } } }),
        }),
      )
      versions.set(key, version)
    }
    return {
      async acquire(key) {
        await put(key, 'held')
        return { release: () => put(key, 'released') }
      },
      close: async () => client.destroy(),
    }
  },
}

/**
 * dynamodb-lock-client 0.7.3 branches on `error.code === "ConditionalCheckFailedException"` (index.js,
 * every put), the aws-sdk v2 shape; SDK v3 errors carry that word in `name`. Without this a lost race
 * would surface as a raw error instead of its own retry.
 */
function v2Shaped(doc: DynamoDBDocument) {
  const call =
    <P>(method: (params: P) => Promise<unknown>) =>
    (params: P, callback: (error?: Error, data?: unknown) => void) =>
      method(params).then(
        (data) => callback(undefined, data),
        (error: Error & { code?: string }) => {
          error.code ??= error.name
          callback(error)
        },
      )
  return {
    get: call(doc.get.bind(doc) as (p: unknown) => Promise<unknown>),
    put: call(doc.put.bind(doc) as (p: unknown) => Promise<unknown>),
    delete: call(doc.delete.bind(doc) as (p: unknown) => Promise<unknown>),
  }
}

const dynamodbPeer: Adapter = {
  name: 'dynamodb-lock-client FailOpen (defaults)',
  store: 'dynamodb',
  kind: 'peer',
  fences: true,
  waits: true,
  handoffAfterLease: true,
  note: 'leaseDurationMs = the bench ttl (required), no heartbeat, retryCount 1 (default); a waiter reads the lock, sleeps a whole lease, then tries a takeover. Its own table',
  async createLocker(env) {
    const table = 'bench-dynamodb-lock-client'
    const client = await tableClient(env, table, 'lockId')
    const locks = new DynamoDBLockClient.FailOpen({
      dynamodb: v2Shaped(DynamoDBDocument.from(client)),
      lockTable: table,
      partitionKey: 'lockId',
      leaseDurationMs: TTL,
    })
    return {
      async acquire(key) {
        const lock = await new Promise<DynamoDBLockClient.Lock>((resolve, reject) =>
          locks.acquireLock(key, (error, l) => (error ? reject(error) : resolve(l!))),
        )
        return {
          fence: BigInt(lock.fencingToken),
          release: () =>
            new Promise<void>((resolve, reject) =>
              lock.release((error) => (error ? reject(error) : resolve())),
            ),
        }
      },
      close: async () => client.destroy(),
    }
  },
}

export const CLOUD_ADAPTERS: Adapter[] = [s3Floor, gcsFloor, dynamodbFloor, dynamodbPeer]

/** The stores whose requests the scenarios count (HTTP requests this process sends). */
export const HTTP_STORES: ReadonlySet<string> = new Set(['s3', 'gcs', 'dynamodb'])
