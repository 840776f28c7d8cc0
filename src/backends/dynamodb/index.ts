/**
 * The DynamoDB backend: the cas-lease engine (src/engines/cas/engine.ts) over one item per lock, written
 * only by conditional PutItems, in the way of Amazon's own lock client (`amazon-dynamodb-lock-client`),
 * with a fence added and a released item deleted (conditioned on its version) once the fence rule allows
 * it (src/engines/cas/retire.ts).
 *
 * - Layout: a table whose only key is the string partition key `pk`, created by you (the AWS CLI command
 *   of layout.ts) or by fencelock only when asked (`createTable=true`, on first use, again if it is deleted
 *   later, or by `fencelock doctor`): a client given a wrong region, account or table name must fail, never make an empty table
 *   of its own and grant locks others hold (a missing table fails at once, naming the region). The item of lock `k`: `pk` = `k` as is, `record` = the
 *   engine's record text (owner, fence, lease length, held/released, holder, key, nonce, store clock), `version` = a fresh
 *   random id per write (layout.ts). Reads are strongly consistent GetItems; a grant, renewal or release
 *   is a PutItem on `attribute_not_exists(pk)` (no item yet) or `version = <the version read>`.
 * - Expiry: observed, never on anyone's wall clock: a waiter takes over only once it has seen the same
 *   `version` unchanged for the record's lease plus a margin on its own monotonic clock (the lock
 *   client's rule). DynamoDB's TTL deletes items up to days late and would reset the fence: not used.
 * - Fence: in the record, advanced by the same conditional write that grants, and lifted to an epoch of
 *   DynamoDB's clock (the HTTP `Date` of the read that decided it, src/engines/cas/fence.ts), so an item
 *   deleted, or a table made again, starts above every earlier fence; renewals and releases keep it,
 *   and a retire (a conditional DeleteItem) waits until DynamoDB's clock keeps the next one above it.
 * - Waiting: no notifications: a waiting process reads the item at a pace that grows to once a second,
 *   and never later than the moment a takeover becomes possible. A refused write returns the item as it
 *   is (`ReturnValuesOnConditionCheckFailure: ALL_OLD`), so it costs no extra read.
 * - Limits: lock names up to 2048 bytes of UTF-8 (DynamoDB's partition key limit), leases up to 24.8 days
 *   (Node timers), one item per lock held or recently released (an abandoned one stays until
 *   taken over; each is a few hundred bytes). A write rounds up to 1 KB units, a strongly consistent read to 4 KB units.
 *   `list` is a Scan of the whole table filtered by `begins_with(pk, …)` after reading (no sort key, so no
 *   Query by prefix): every item is read and billed. A break is the engine's (a release's write, no owner
 *   check): 1 GetItem + 1 conditional PutItem.
 * - Atomic sets (`acquireAll(keys, { atomic: true })`): the keys' conditional Puts in one
 *   TransactWriteItems (at most 100 keys, DynamoDB's limit of actions; more are refused before any request).
 * - Election: the engine again over the items whose `pk` starts with NUL and `election/` (layout.ts);
 *   lock names starting with NUL are refused so that no lock can be one. The record carries the leader's
 *   value; observers read it once a second (src/engines/cas/election.ts).
 *
 * Files: adapter.ts (the CasAdapter: GetItem, conditional PutItem, Scan for list, the table made on first use), layout.ts
 * (attribute names, the table's key, its CLI command; shared with the tests), table.ts (creating and
 * checking the table), faults.ts (errors in words, which ones waiting can help), doctor.ts (the table's key
 * and conditional writes proved on a probe item).
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb'
import type { LockBackend } from '../../core/backend.js'
import { importDriver } from '../../core/drivers.js'
import { loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { casLeaseBackend } from '../../engines/cas/backend.js'
import { DynamoDbCasAdapter, type DynamoDbCasAdapterOptions } from './adapter.js'
import { ELECTION_NAMESPACE } from './layout.js'
import type { DynamoDbSdk } from './table.js'

export { DYNAMODB_LIMITS, DynamoDbCasAdapter } from './adapter.js'
export {
  ATTR,
  createTableCommand,
  ELECTION_NAMESPACE,
  electionItemKey,
  itemKey,
  tableDefinition,
} from './layout.js'

/** What `dynamodbBackend` is told. */
export interface DynamoDbBackendOptions {
  /** A `DynamoDBClient` of `@aws-sdk/client-dynamodb` (its region, credentials, endpoint, retries). fencelock never closes it. */
  readonly client: DynamoDBClient
  /** The lock table: its only key is the string partition key `pk`. */
  readonly table: string
  /**
   * Create the table (on-demand capacity) on first use when it does not exist. Off by default: a client
   * pointed at the wrong region or account would make an empty table of its own there. @default false
   */
  readonly createTable?: boolean | undefined
  /** Names the store in errors. @default `dynamodb://<table>` */
  readonly id?: string | undefined
}

const PKG = '@aws-sdk/client-dynamodb'
const loadSdk = (): Promise<DynamoDbSdk> => importDriver(PKG, () => import('@aws-sdk/client-dynamodb'))

/** DynamoDB's rule for table names: 3 to 255 of letters, digits, `_`, `-` and `.`. */
const TABLE_NAME = /^[A-Za-z0-9_.-]{3,255}$/

function checkTable(table: unknown, where: string): string {
  if (typeof table !== 'string' || !TABLE_NAME.test(table)) {
    throw new TypeError(
      `Expected a DynamoDB table name (3 to 255 letters, digits, "_", "-" or ".") ${where}, got ${JSON.stringify(table)}`,
    )
  }
  return table
}

/**
 * Creates a DynamoDB backend over your `DynamoDBClient`.
 * @example
 * import { DynamoDBClient } from '@aws-sdk/client-dynamodb'
 * const locks = createLockClient(dynamodbBackend({ client: new DynamoDBClient({}), table: 'locks' }))
 */
export function dynamodbBackend(options: DynamoDbBackendOptions): LockBackend {
  const { client } = options
  if (!client || typeof client.send !== 'function') {
    throw new TypeError('Expected `client` to be a DynamoDBClient of the @aws-sdk/client-dynamodb package')
  }
  const table = checkTable(options.table, 'as `table`')
  const id = options.id ?? `dynamodb://${table}`
  return dynamodbEngine({ client, table, createTable: options.createTable ?? false, id, owned: false })
}

/** The engine over the table: its locks' adapter, and its elections' (layout.ts), which never closes the client. */
function dynamodbEngine(options: DynamoDbCasAdapterOptions): LockBackend {
  const elections = new DynamoDbCasAdapter(
    { ...options, owned: false, namespace: ELECTION_NAMESPACE },
    loadSdk,
  )
  return casLeaseBackend(new DynamoDbCasAdapter(options, loadSdk), {}, elections)
}

/** The URL parameters of `dynamodb://table` (tested against its page in docs/backends/, like every backend's). */
export const PARAMS = {
  region: {
    type: 'string',
    doc: "the table's AWS region (default: the SDK's, from AWS_REGION or the profile)",
  },
  endpoint: { type: 'string', doc: 'another endpoint, e.g. http://127.0.0.1:8000 for DynamoDB Local' },
  createTable: {
    type: 'bool',
    default: false,
    doc: 'create the table (on-demand) on first use, or by fencelock doctor, when it does not exist',
  },
} as const satisfies ParamSchema

/**
 * `dynamodb://table?region=&endpoint=&createTable=`: credentials come from the AWS SDK's own chain
 * (environment, profile, role), never from the URL.
 */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const sdk = await loadDriver(PKG, 'dynamodb', url, () => import('@aws-sdk/client-dynamodb'))
  const params = readParams(url, PARAMS)
  if (url.username || url.password) {
    throw new TypeError(
      `Expected no user or password in ${redact(url)}: credentials come from the AWS SDK (environment, profile, role)`,
    )
  }
  if (url.pathname !== '' && url.pathname !== '/') {
    throw new TypeError(`Expected dynamodb://TABLE with no path, got ${redact(url)}`)
  }
  const table = checkTable(decodeURIComponent(url.host), `in ${redact(url)}`)
  if (params.endpoint !== undefined && !/^https?:\/\/[^/?#]+/.test(params.endpoint)) {
    throw new TypeError(
      `Expected \`endpoint\` in ${redact(url)} to be an http(s) URL, got ${JSON.stringify(params.endpoint)}`,
    )
  }
  const client = new sdk.DynamoDBClient({
    ...(params.region === undefined ? {} : { region: params.region }),
    ...(params.endpoint === undefined ? {} : { endpoint: params.endpoint }),
  })
  return dynamodbEngine({
    client,
    table,
    createTable: params.createTable,
    id: redact(url),
    owned: true,
    sdk,
    endpoint: params.endpoint,
  })
}
