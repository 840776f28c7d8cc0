/**
 * The DynamoDB backend's kit: the real DynamoDB Local (Amazon's jar, test/servers/dynamodb.ts), keeping its
 * tables in its folder, so a crash or a restart keeps every record and its fence (durable fences). Clients
 * of this process and `fencelock hold` children reach it through the URL's `endpoint`; the table is made
 * by the backend on first use (`createTable`, on by default), as it would be on AWS.
 *
 * The minimum ttl is 2 s: a takeover comes a lease plus a margin (at least 200 ms) after a waiter first
 * saw the record unchanged, and renewals every ttl/3 go through the SDK over HTTP to a JVM on a machine the
 * other tests share; shorter leases would test the machine's load more than the lock.
 */
import { DynamoDbDriver } from '../../src/backends/dynamodb/index.js'
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

function dynamodbStore(server: DynamoDbServer): KitStore {
  const admin = localClient(server.endpoint)
  // The backend's own driver, so a lease is broken at the very item and in the very format it uses.
  const driver = new DynamoDbDriver(
    { client: admin, table: TABLE, createTable: true, id: 'kit admin', owned: false },
    () => import('@aws-sdk/client-dynamodb'),
  )
  return {
    url: (query = '') => urlAt(server.port, query),
    ports: [server.port],
    urlVia: ([port], query = '') => urlAt(port!, query),
    breakLease: (key) => releaseBehindHolder(driver, key),
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
  entry: 'dynamodb',
  networked: true,
  capabilities: casCapabilities(2000),
  lacks: CAS_LACKS,
  async start() {
    useLocalCredentials()
    return dynamodbStore(await startDynamoDb())
  },
  // No store-side switches (a real jar): its lost replies are the proxies' (S13); no 503 bursts.
  chaos: [{ name: 'dynamodb', features: ['crash', 'durable', 'expire'] }],
  bench: [{ name: 'fencelock dynamodb', store: 'dynamodb', note: 'DynamoDB Local (a JVM on this machine)' }],
}
