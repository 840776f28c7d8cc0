/**
 * The lock table: made when it does not exist only when the user asked (`createTable=true`: on first use,
 * or by doctor), and checked by doctor. Creating it is the one place a DynamoDB call waits for something: a new table is CREATING for a
 * few seconds on AWS (ACTIVE at once on DynamoDB Local), and the SDK's own waiter polls DescribeTable until
 * it is ACTIVE (its loop, not ours).
 */
import type { DynamoDBClient, TableDescription } from '@aws-sdk/client-dynamodb'
import { ATTR, tableDefinition } from './layout.js'

/** The parts of `@aws-sdk/client-dynamodb` fencelock uses (the module itself, loaded once). */
export type DynamoDbSdk = Pick<
  typeof import('@aws-sdk/client-dynamodb'),
  | 'GetItemCommand'
  | 'PutItemCommand'
  | 'TransactWriteItemsCommand'
  | 'ScanCommand'
  | 'DeleteItemCommand'
  | 'CreateTableCommand'
  | 'DescribeTableCommand'
  | 'waitUntilTableExists'
>

/** How long a new table may take to become ACTIVE, in seconds (AWS: typically under 30). */
const ACTIVE_WITHIN_S = 120

/** Creates the lock table (on-demand), or finds it being created by another process; resolves once it is ACTIVE. */
export async function createTable(client: DynamoDBClient, sdk: DynamoDbSdk, table: string): Promise<void> {
  try {
    await client.send(new sdk.CreateTableCommand(tableDefinition(table)))
  } catch (error) {
    // Another process (or a doctor run) created it first: wait for the same table.
    if ((error as { name?: string }).name !== 'ResourceInUseException') throw error
  }
  await sdk.waitUntilTableExists(
    { client, maxWaitTime: ACTIVE_WITHIN_S, minDelay: 1, maxDelay: 5 },
    { TableName: table },
  )
}

/** What is wrong with a table's key schema for fencelock, in words; undefined when it is right. */
export function schemaProblem(description: TableDescription): string | undefined {
  const keys = description.KeySchema ?? []
  const type = description.AttributeDefinitions?.find((a) => a.AttributeName === ATTR.key)?.AttributeType
  if (
    keys.length === 1 &&
    keys[0]!.AttributeName === ATTR.key &&
    keys[0]!.KeyType === 'HASH' &&
    type === 'S'
  ) {
    return undefined
  }
  const shown = keys.map((k) => `${k.AttributeName} (${k.KeyType})`).join(', ') || 'none'
  return `its key is ${shown}; fencelock needs a table whose only key is the string partition key "${ATTR.key}"`
}
