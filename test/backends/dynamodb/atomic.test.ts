/**
 * Atomic multi-key acquisition on DynamoDB (one TransactWriteItems of the keys' conditional Puts), as the
 * store and the SDK see it: a set larger than one transaction takes is refused before any request, one
 * of exactly that size is granted; a transaction cancelled for another transaction on an item is tried
 * again, never surfaced and never taken for an unknown outcome; and DynamoDB Local answers transactions
 * as the service documents what the adapter relies on.
 */
import assert from 'node:assert/strict'
import { Readable } from 'node:stream'
import { describe, it } from 'node:test'
import { type DynamoDBClient, PutItemCommand, TransactWriteItemsCommand } from '@aws-sdk/client-dynamodb'
import { dynamodbBackend, itemKey } from '../../../src/backends/dynamodb/index.js'
import { CapabilityError, createLockClient } from '../../../src/index.js'
import { dynamodbKit, TABLE } from '../../kits/dynamodb.js'
import { suiteStore } from '../../kits/suite-store.js'
import { localClient } from '../../servers/dynamodb.js'

const ATOMIC = { atomic: true } as const

/** The operation of a DynamoDB request (`TransactWriteItems`), from its `X-Amz-Target` header. */
function operationOf(args: unknown): string {
  const headers = (args as { request?: { headers?: Record<string, string> } }).request?.headers ?? {}
  const target = headers['x-amz-target'] ?? headers['X-Amz-Target'] ?? ''
  return target.slice(target.indexOf('.') + 1)
}

/**
 * Counts the requests `client` sends, by operation; `answer`, when it returns a body for a request, is
 * sent back to the SDK as DynamoDB's HTTP 400 answer instead of the request (which never leaves).
 */
function watch(client: DynamoDBClient, answer: (operation: string) => object | undefined = () => undefined) {
  const sent = new Map<string, number>()
  client.middlewareStack.add(
    (next) => async (args) => {
      const operation = operationOf(args)
      sent.set(operation, (sent.get(operation) ?? 0) + 1)
      const body = answer(operation)
      if (body === undefined) return next(args)
      // What the SDK's deserializer takes as an HTTP response (its HttpResponse's shape).
      const response = {
        statusCode: 400,
        reason: 'Bad Request',
        headers: { 'content-type': 'application/x-amz-json-1.0', date: new Date().toUTCString() },
        body: Readable.from([Buffer.from(JSON.stringify(body))]),
      }
      return { response, output: {} } as never
    },
    // Inside the SDK's deserializer, which turns a made-up answer into the SDK's own error.
    { step: 'deserialize', priority: 'low', name: 'fencelockTestWatch' },
  )
  return (operation: string) => sent.get(operation) ?? 0
}

/** DynamoDB's answer to a transaction of `actions` cancelled for another transaction on the first item. */
function conflictOn(actions: number): object {
  const reasons = Array.from({ length: actions }, (_, i) =>
    i === 0
      ? { Code: 'TransactionConflict', Message: 'Transaction is ongoing for the item' }
      : { Code: 'None' },
  )
  return {
    __type: 'com.amazonaws.dynamodb.v20120810#TransactionCanceledException',
    Message: `Transaction cancelled, please refer cancellation reasons for specific reasons [${reasons.map((r) => r.Code).join(', ')}]`,
    CancellationReasons: reasons,
  }
}

describe('dynamodb: atomic multi-key acquisition on DynamoDB Local', { timeout: 180_000 }, () => {
  const { store } = suiteStore(dynamodbKit, {})
  /** A client of its own, which the test watches (the kit's store serves one port: its DynamoDB Local). */
  const sdkClient = () => localClient(`http://127.0.0.1:${store().ports[0]}`)

  it('refuses more keys than one transaction takes before any request; takes exactly that many', async () => {
    const client = sdkClient()
    const sent = watch(client)
    const locks = createLockClient(dynamodbBackend({ client, table: TABLE }), { ttl: '30s' })
    try {
      const keys = (n: number) =>
        Array.from({ length: n }, (_, i) => `limit:${n}:${String(i).padStart(3, '0')}`)
      const error = await locks.acquireAll(keys(101), { ...ATOMIC, timeout: '10s' }).then(
        () => assert.fail('took 101 keys in one transaction'),
        (e: unknown) => e,
      )
      assert.ok(error instanceof CapabilityError, `got ${error}`)
      assert.match(error.message, /101 keys are more than the 100 writes one transaction of the store takes/)
      assert.match(error.message, /Leave `atomic` out/)
      assert.equal(sent('GetItem') + sent('TransactWriteItems') + sent('PutItem'), 0, 'no request was sent')
      const all = await locks.acquireAll(keys(100), { ...ATOMIC, timeout: '60s' })
      assert.equal(all.keys.length, 100)
      assert.equal(new Set(all.fences.values()).size >= 1, true)
      assert.deepEqual(await all.release(), [], 'every key was still held at the release')
    } finally {
      await locks.close()
      client.destroy()
    }
  })

  it('tries a transaction cancelled for a conflict again: no error, and no clean-up of an unknown outcome', async () => {
    const client = sdkClient()
    const keys = ['conflict:a', 'conflict:b', 'conflict:c']
    let conflicts = 0
    // The first two transactions meet another transaction (the keys are new: the first places them).
    const sent = watch(client, (operation) =>
      operation === 'TransactWriteItems' && conflicts < 2
        ? (conflicts++, conflictOn(keys.length))
        : undefined,
    )
    const locks = createLockClient(dynamodbBackend({ client, table: TABLE }), { ttl: '30s' })
    try {
      const all = await locks.acquireAll(keys, { ...ATOMIC, timeout: '60s' })
      assert.equal(conflicts, 2, 'both conflicts were met')
      assert.ok(
        sent('TransactWriteItems') >= 4,
        'the placing and the granting transaction were sent after them',
      )
      // A conflict taken for a failure would have left an unknown outcome: its clean-up writes single items.
      assert.equal(sent('PutItem'), 0, 'no clean-up write was sent')
      for (const key of keys) assert.equal((await locks.inspect(key)).owner, all.locks.get(key)!.owner)
      await all.release()
    } finally {
      await locks.close()
      client.destroy()
    }
  })

  it('answers transactions as DynamoDB documents: reasons in the order of the actions, an item twice refused', async () => {
    const client = sdkClient()
    const put = (pk: string, condition?: string) => ({
      Put: {
        TableName: TABLE,
        Item: { ...itemKey(pk), version: { S: 'v' } },
        ...(condition ? { ConditionExpression: condition } : {}),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
      },
    })
    try {
      await client.send(
        new PutItemCommand({ TableName: TABLE, Item: { ...itemKey('doc:held'), version: { S: 'v' } } }),
      )
      const error = await client
        .send(
          new TransactWriteItemsCommand({
            TransactItems: [
              put('doc:free', 'attribute_not_exists(pk)'),
              put('doc:held', 'attribute_not_exists(pk)'),
              put('doc:other', 'attribute_not_exists(pk)'),
            ],
          }),
        )
        .then(
          () => assert.fail('a failed condition wrote the transaction'),
          (e: unknown) => e as { name: string; CancellationReasons?: { Code?: string; Item?: unknown }[] },
        )
      assert.equal(error.name, 'TransactionCanceledException')
      assert.deepEqual(
        error.CancellationReasons?.map((r) => r.Code),
        ['None', 'ConditionalCheckFailed', 'None'],
      )
      assert.deepEqual(error.CancellationReasons?.[1]?.Item, { ...itemKey('doc:held'), version: { S: 'v' } })
      const twice = await client
        .send(new TransactWriteItemsCommand({ TransactItems: [put('doc:twice'), put('doc:twice')] }))
        .then(
          () => assert.fail('one item in two actions was written'),
          (e: unknown) => e as Error,
        )
      assert.equal(twice.name, 'ValidationException')
      assert.match(twice.message, /multiple operations on one item/i)
    } finally {
      client.destroy()
    }
  })
})
