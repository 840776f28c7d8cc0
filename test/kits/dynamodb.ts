/**
 * The DynamoDB backend's kit: the real DynamoDB Local (Amazon's jar, test/servers/dynamodb.ts), keeping its
 * tables in its folder, so a crash or a restart keeps every record and its fence (durable fences). Clients
 * of this process and `fencelock hold` children reach it through the URL's `endpoint`; the kit makes the
 * table when it starts, as an operator would (fencelock makes none unless asked: `createTable=true`).
 *
 * The minimum ttl is 2 s: a takeover comes a lease plus a margin (at least 200 ms) after a waiter first
 * saw the record unchanged, and renewals every ttl/3 go through the SDK over HTTP to a JVM on a machine the
 * other tests share; shorter leases would test the machine's load more than the lock.
 */
import {
  type AttributeValue,
  BatchWriteItemCommand,
  DeleteTableCommand,
  type DynamoDBClient,
  ScanCommand,
} from '@aws-sdk/client-dynamodb'
import { DynamoDbCasAdapter, itemKey } from '../../src/backends/dynamodb/index.js'
import { createTable } from '../../src/backends/dynamodb/table.js'
import {
  type DynamoDbServer,
  LOCAL_REGION,
  localClient,
  startDynamoDb,
  useLocalCredentials,
} from '../servers/dynamodb.js'
import { CAS_LACKS, casCapabilities, releaseBehindHolder } from './cas.js'
import type { Kit, KitStore } from './kit.js'

export const TABLE = 'fencelock-tests'

const urlAt = (port: number, query: string) =>
  `dynamodb://${TABLE}?endpoint=http://127.0.0.1:${port}&region=${LOCAL_REGION}${query.replace(/^\?/, '&')}`

/** Kills (SIGKILL) DynamoDB Local and starts it again on its port and folder: every item stays. */
async function crash(server: DynamoDbServer): Promise<void> {
  server.signal('SIGKILL')
  await server.restart()
}

const sdk = () => import('@aws-sdk/client-dynamodb')

/** Makes the kit's table (on-demand), as an operator does before the first lock; an existing one is kept. */
export async function makeTable(admin: DynamoDBClient, table = TABLE): Promise<void> {
  await createTable(admin, await sdk(), table)
}

/** Drops the kit's table and makes it again, empty: every record and its fence gone. */
export async function remakeTable(admin: DynamoDBClient, table = TABLE): Promise<void> {
  await admin.send(new DeleteTableCommand({ TableName: table }))
  await makeTable(admin, table)
}

/**
 * What an operator's clean-up does: deletes `key`'s item, or every item of the kit's table (a Scan, then
 * unconditional deletes in batches of 25, DynamoDB's limit).
 */
async function deleteItems(admin: DynamoDBClient, key?: string): Promise<void> {
  const keys: string[] = []
  if (key !== undefined) keys.push(key)
  else {
    let start: Record<string, AttributeValue> | undefined
    do {
      const page = await admin.send(
        new ScanCommand({ TableName: TABLE, ProjectionExpression: 'pk', ExclusiveStartKey: start }),
      )
      for (const item of page.Items ?? []) keys.push(item.pk!.S!)
      start = page.LastEvaluatedKey
    } while (start)
  }
  for (let i = 0; i < keys.length; i += 25) {
    const requests = keys.slice(i, i + 25).map((k) => ({ DeleteRequest: { Key: itemKey(k) } }))
    await admin.send(new BatchWriteItemCommand({ RequestItems: { [TABLE]: requests } }))
  }
}

function dynamodbStore(server: DynamoDbServer): KitStore {
  const admin = localClient(server.endpoint)
  // The backend's own driver, so a lease is broken at the very item and in the very format it uses.
  const driver = new DynamoDbCasAdapter(
    { client: admin, table: TABLE, createTable: false, id: 'kit admin', owned: false },
    () => import('@aws-sdk/client-dynamodb'),
  )
  return {
    url: (query = '') => urlAt(server.port, query),
    ports: [server.port],
    urlVia: ([port], query = '') => urlAt(port!, query),
    breakLease: (key) => releaseBehindHolder(driver, key),
    deleteState: (key) => deleteItems(admin, key),
    crash: () => crash(server),
    restart: () => crash(server),
    pause() {
      server.signal('SIGSTOP')
      return () => server.signal('SIGCONT')
    },
    logs: () => ({ dynamodb: server.log() }),
    // A JVM restarted: the clients' pooled connections to the old one fail once, the SDK retries them.
    recoveryMs: 5000,
    async close() {
      admin.destroy()
      await server.destroy()
    },
  }
}

export const dynamodbKit: Kit = {
  id: 'dynamodb',
  backend: 'dynamodb',
  title: 'dynamodb (DynamoDB Local)',
  entry: 'dynamodb/conformance',
  primitives: ['mutex', 'slots', 'election', 'multikey', 'multikey-atomic', 'resume'],
  networked: true,
  capabilities: casCapabilities(2000),
  lacks: CAS_LACKS,
  async start() {
    useLocalCredentials()
    const server = await startDynamoDb()
    const store = dynamodbStore(server)
    const admin = localClient(server.endpoint)
    try {
      await makeTable(admin)
    } catch (error) {
      await store.close()
      throw error
    } finally {
      admin.destroy()
    }
    return store
  },
  // No store-side switches (a real jar): its lost replies are the proxies' (S13); no 503 bursts.
  chaos: [{ name: 'dynamodb', features: ['crash', 'durable', 'expire', 'delete-state'] }],
  bench: [{ name: 'fencelock dynamodb', store: 'dynamodb', note: 'DynamoDB Local (a JVM on this machine)' }],
}
