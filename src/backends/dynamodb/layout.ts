/**
 * Where a lock lives in DynamoDB, in one place: the backend, doctor and the tests (breaking a lease, reading
 * a record) all use these names; nobody copies them.
 *
 * One item per lock, in a table of its own (or shared with nothing else that uses the key `pk`):
 *   pk       S  the lock's name, as is (DynamoDB takes any non-empty UTF-8 string up to 2048 bytes as a key);
 *               an election's name after `\u0000election/` (no lock name starts with NUL: refused)
 *   record   S  the engine's record text (owner, fence, lease length, state, holder, key, nonce)
 *   version  S  a fresh random id per write: what a conditional replace compares
 */
import type { CreateTableCommandInput } from '@aws-sdk/client-dynamodb'

/** The item's attribute names. */
export const ATTR = { key: 'pk', record: 'record', version: 'version' } as const

/** The key of the item of lock `key` (GetItem/DeleteItem `Key`). */
export const itemKey = (key: string): { pk: { S: string } } => ({ pk: { S: key } })

/** The longest partition key DynamoDB accepts, in UTF-8 bytes: the longest lock name. */
export const MAX_KEY_BYTES = 2048

/**
 * The start of every `pk` fencelock keeps for something other than a lock: a lock name is the key as
 * is, so any string could be one, and the backend refuses lock names starting with NUL (U+0000) to keep
 * this space its own. A lock listing leaves these items out.
 */
export const RESERVED_KEY_PREFIX = '\u0000'

/** Where elections live: the item of election `name` has `pk` = this + `name`. */
export const ELECTION_NAMESPACE = `${RESERVED_KEY_PREFIX}election/`

/** The key of the item of election `name`. */
export const electionItemKey = (name: string): { pk: { S: string } } =>
  itemKey(`${ELECTION_NAMESPACE}${name}`)

/** The table fencelock creates (or that you create): its only key is the string partition key `pk`. */
export function tableDefinition(table: string): CreateTableCommandInput {
  return {
    TableName: table,
    AttributeDefinitions: [{ AttributeName: ATTR.key, AttributeType: 'S' }],
    KeySchema: [{ AttributeName: ATTR.key, KeyType: 'HASH' }],
    // On-demand: a lock table's traffic comes in bursts (a deploy, a cron minute), and costs nothing idle.
    BillingMode: 'PAY_PER_REQUEST',
  }
}

/** Where a table lives, for the command that creates it: its region and a non-AWS endpoint. */
export interface TablePlace {
  readonly region?: string | undefined
  readonly endpoint?: string | undefined
}

/**
 * The AWS CLI command that creates the table, for messages and the docs; with the region (and the
 * endpoint of a DynamoDB Local) the client uses, so the table is made where this client looks.
 */
export const createTableCommand = (table: string, place: TablePlace = {}): string =>
  `aws dynamodb create-table --table-name ${table} --attribute-definitions AttributeName=${ATTR.key},AttributeType=S ` +
  `--key-schema AttributeName=${ATTR.key},KeyType=HASH --billing-mode PAY_PER_REQUEST` +
  (place.region ? ` --region ${place.region}` : '') +
  (place.endpoint ? ` --endpoint-url ${place.endpoint}` : '')
