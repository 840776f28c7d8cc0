import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import {
  CreateTableCommand,
  GetItemCommand,
  ListTablesCommand,
  PutItemCommand,
} from '@aws-sdk/client-dynamodb'
import { tempDir } from '../support/temp.js'
import { localClient, startDynamoDb } from './dynamodb.js'
import { squat, takenFirst } from './squat.js'

describe('test servers: DynamoDB Local', { timeout: 240_000 }, () => {
  it('starts on another port when its first one was taken, answers ListTables, and keeps items across a restart', async () => {
    const squatter = await squat()
    const pickPorts = takenFirst(squatter.port)
    try {
      const server = await startDynamoDb({ pickPorts })
      const client = localClient(server.endpoint, { maxAttempts: 1 })
      try {
        assert.notEqual(server.port, squatter.port)
        assert.equal(pickPorts.picks, 2)
        assert.deepEqual((await client.send(new ListTablesCommand({}))).TableNames, [])
        await client.send(
          new CreateTableCommand({
            TableName: 'kept',
            AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
            KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
            BillingMode: 'PAY_PER_REQUEST',
          }),
        )
        await client.send(new PutItemCommand({ TableName: 'kept', Item: { pk: { S: 'a' }, n: { N: '7' } } }))
        // A crash, not a clean stop: what the durable-fences cases and the chaos crashes do.
        server.signal('SIGKILL')
        await server.restart()
        const { Item } = await client.send(
          new GetItemCommand({ TableName: 'kept', Key: { pk: { S: 'a' } }, ConsistentRead: true }),
        )
        assert.deepEqual(Item, { pk: { S: 'a' }, n: { N: '7' } })
      } finally {
        client.destroy()
        await server.destroy()
      }
    } finally {
      await squatter.close()
    }
  })

  it('says which jar is missing and the command that installs it', async () => {
    const nowhere = tempDir('no-dynamodb-local')
    try {
      await assert.rejects(startDynamoDb({ emulatorDir: nowhere.path }), (error: Error) => {
        assert.ok(error.message.includes(`no ${nowhere.path}/DynamoDBLocal.jar`), error.message)
        assert.match(error.message, /npm run test:all/)
        assert.match(error.message, /npm pack amplify-dynamodb-simulator@2\.9\.30/)
        return true
      })
    } finally {
      nowhere.cleanup()
    }
  })
})
