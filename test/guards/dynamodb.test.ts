/**
 * The DynamoDB fence guard that docs/fence-guards.md gives (a ConditionExpression, no helper), on a real
 * DynamoDB Local: the first write to an item without a fence goes through, a stale fence is refused with
 * ConditionalCheckFailedException once a later one has written, and fences past 2^53 compare exactly
 * (DynamoDB numbers are decimals of up to 38 digits, passed as strings).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import {
  ConditionalCheckFailedException,
  CreateTableCommand,
  type DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb'
import { type DynamoDbServer, localClient, startDynamoDb } from '../servers/dynamodb.js'

/** The guarded write as the page gives it. */
const guardedWrite = (id: string, body: string, fence: bigint) =>
  new UpdateItemCommand({
    TableName: 'report',
    Key: { id: { S: id } },
    UpdateExpression: 'SET #body = :body, #fence = :fence',
    ConditionExpression: 'attribute_exists(#id) AND (attribute_not_exists(#fence) OR #fence <= :fence)',
    ExpressionAttributeNames: { '#id': 'id', '#body': 'body', '#fence': 'fence' },
    ExpressionAttributeValues: { ':body': { S: body }, ':fence': { N: fence.toString() } },
  })

describe('guards: the DynamoDB ConditionExpression (DynamoDB Local)', { timeout: 180_000 }, () => {
  let server: DynamoDbServer
  let dynamo: DynamoDBClient
  before(async () => {
    server = await startDynamoDb()
    dynamo = localClient(server.endpoint)
    await dynamo.send(
      new CreateTableCommand({
        TableName: 'report',
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    )
  })
  after(async () => {
    dynamo?.destroy()
    await server?.destroy()
  })

  const write = async (id: string, body: string, fence: bigint) => {
    try {
      await dynamo.send(guardedWrite(id, body, fence))
      return true
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return false
      throw error
    }
  }
  const read = async (id: string) => {
    const { Item } = await dynamo.send(new GetItemCommand({ TableName: 'report', Key: { id: { S: id } } }))
    return [Item?.body?.S, Item?.fence?.N]
  }

  it('the first write without a fence, the same fence again, a later one; then the stale one is refused', async () => {
    await dynamo.send(
      new PutItemCommand({ TableName: 'report', Item: { id: { S: '7' }, body: { S: 'empty' } } }),
    )
    assert.equal(await write('7', 'first', 5n), true, 'the item has no fence attribute yet')
    assert.equal(await write('7', 'first, again', 5n), true)
    assert.equal(await write('7', 'second', 6n), true)
    assert.equal(await write('7', 'stale', 5n), false)
    assert.deepEqual(await read('7'), ['second', '6'])
    assert.equal(await write('missing', 'x', 9n), false, 'no such item: nothing is created')
  })

  it('fences past 2^53 that differ by one: the older is refused', async () => {
    await dynamo.send(new PutItemCommand({ TableName: 'report', Item: { id: { S: 'big' } } }))
    const newer = 2n ** 53n + 1n
    assert.equal(await write('big', 'newer', newer), true)
    assert.equal(await write('big', 'older', newer - 1n), false)
    assert.equal(await write('big', 'largest', 2n ** 63n - 1n), true)
    assert.deepEqual(await read('big'), ['largest', String(2n ** 63n - 1n)])
  })
})
