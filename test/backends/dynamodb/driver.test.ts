/**
 * The DynamoDB driver of the cas-lease engine against the real DynamoDB Local, through the official SDK:
 * conditional create and replace, refusals as values carrying the item as it is (ALL_OLD), the table made
 * on first use (also by two drivers at once), failures as BackendUnavailableError with the words that help,
 * and doctor, also on a server that ignores condition expressions (DynamoDB Local behind a proxy that
 * strips them, the way a look-alike store would ignore them).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import * as sdk from '@aws-sdk/client-dynamodb'
import {
  CreateTableCommand,
  DeleteTableCommand,
  DescribeTableCommand,
  type DynamoDBClient,
} from '@aws-sdk/client-dynamodb'
import { DynamoDbCasAdapter } from '../../../src/backends/dynamodb/index.js'
import { type DynamoDbServer, localClient, startDynamoDb, startLaxProxy } from '../../servers/dynamodb.js'
import { freePort } from '../../servers/ports.js'
import { unavailable } from '../cas/driver-cases.js'

const signal = new AbortController().signal
let server: DynamoDbServer
let client: DynamoDBClient
let tables = 0
let keys = 0
/** A table name / lock key no other test uses. */
const freshTable = () => `t${++tables}-${process.pid}`
const freshKey = () => `k${++keys}`

const driverOf = (table: string, options: { createTable?: boolean; via?: DynamoDBClient } = {}) =>
  new DynamoDbCasAdapter(
    {
      client: options.via ?? client,
      table,
      createTable: options.createTable ?? true,
      id: `dynamodb://${table}`,
      owned: false,
      endpoint: server.endpoint,
    },
    async () => sdk,
  )

describe('dynamodb driver (DynamoDB Local)', { timeout: 120_000 }, () => {
  before(async () => {
    server = await startDynamoDb()
    client = localClient(server.endpoint, { maxAttempts: 1 })
  })
  after(async () => {
    client?.destroy()
    await server?.destroy()
  })

  it('creates only when absent and replaces only at the version read; a refusal brings the item as it is', async () => {
    const driver = driverOf(freshTable())
    const key = freshKey()
    assert.equal(await driver.read(key, signal), undefined)
    const first = await driver.create(key, 'one', signal)
    assert.ok(first.ok)
    assert.deepEqual(await driver.create(key, 'two', signal), {
      ok: false,
      current: { body: 'one', version: first.version },
    })
    const second = await driver.replace(key, 'three', first.version, signal)
    assert.ok(second.ok)
    assert.notEqual(second.version, first.version)
    assert.deepEqual(await driver.replace(key, 'four', first.version, signal), {
      ok: false,
      current: { body: 'three', version: second.version },
    })
    // The same body again still gets a new version: versions are ours, not content hashes.
    const third = await driver.replace(key, 'three', second.version, signal)
    assert.ok(third.ok && third.version !== second.version)
    assert.deepEqual(await driver.read(key, signal), { body: 'three', version: third.version })
    // No item: a replace is refused, and there is nothing to bring.
    assert.deepEqual(await driver.replace(freshKey(), 'x', first.version, signal), {
      ok: false,
      current: undefined,
    })
  })

  it('lets exactly one of ten racing creates win; every loser is handed the winner', async () => {
    const driver = driverOf(freshTable())
    await driver.read('warm-up', signal) // the table is made once, before the race
    const key = freshKey()
    const writes = await Promise.all(
      Array.from({ length: 10 }, (_, i) => driver.create(key, `racer ${i}`, signal)),
    )
    const winners = writes.filter((w) => w.ok)
    assert.equal(winners.length, 1)
    const stored = await driver.read(key, signal)
    for (const w of writes) if (!w.ok) assert.deepEqual(w.current, stored)
  })

  it('makes a missing table on first use, also when two drivers find it missing at once', async () => {
    const table = freshTable()
    const [a, b] = [driverOf(table), driverOf(table)]
    const [wa, wb] = await Promise.all([a.create('x', 'a', signal), b.create('y', 'b', signal)])
    assert.ok(wa.ok && wb.ok)
    const { Table } = await client.send(new DescribeTableCommand({ TableName: table }))
    assert.deepEqual(Table?.KeySchema, [{ AttributeName: 'pk', KeyType: 'HASH' }])
    assert.equal(Table?.BillingModeSummary?.BillingMode, 'PAY_PER_REQUEST')
  })

  it('says how to create the table when it is missing and createTable is off', async () => {
    const table = freshTable()
    const error = await unavailable(driverOf(table, { createTable: false }).read('k', signal))
    assert.equal(error.retryable, false)
    assert.match(error.message, /ResourceNotFoundException/)
    assert.ok(error.message.includes(`aws dynamodb create-table --table-name ${table} `), error.message)
  })

  it('names a table whose key is not fencelock’s, in the error and in doctor', async () => {
    const table = freshTable()
    await client.send(
      new CreateTableCommand({
        TableName: table,
        AttributeDefinitions: [{ AttributeName: 'key', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'key', KeyType: 'HASH' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    )
    const driver = driverOf(table)
    const error = await unavailable(driver.create('k', 'x', signal))
    assert.equal(error.retryable, false)
    assert.match(error.message, /ValidationException .*run fencelock doctor/)
    const findings = await driver.doctor(signal)
    assert.equal(findings.length, 1)
    assert.equal(findings[0]!.level, 'error')
    assert.match(findings[0]!.message, /its key is key \(HASH\); fencelock needs .* "pk"/)
  })

  it('makes the table again when it is deleted while the driver runs (createTable on)', async () => {
    const table = freshTable()
    const driver = driverOf(table)
    assert.ok((await driver.create('k', 'one', signal)).ok)
    await client.send(new DeleteTableCommand({ TableName: table }))
    assert.equal(await driver.read('k', signal), undefined)
    assert.ok((await driver.create('k', 'two', signal)).ok)
    await client.send(new DeleteTableCommand({ TableName: table }))
    assert.ok((await driver.create('k', 'three', signal)).ok, 'made again, also a second time')
  })

  it('a table deleted while the driver runs with createTable off: names table, region and the fixes', async () => {
    const table = freshTable()
    await driverOf(table).read('warm-up', signal) // made by another driver, as an operator would
    const driver = driverOf(table, { createTable: false })
    assert.ok((await driver.create('k', 'one', signal)).ok)
    await client.send(new DeleteTableCommand({ TableName: table }))
    const error = await unavailable(driver.read('k', signal))
    assert.equal(error.retryable, false)
    assert.match(
      error.message,
      new RegExp(`table "${table}" does not exist in region \\S+ at ${server.endpoint}`),
    )
    assert.ok(error.message.includes(`aws dynamodb create-table --table-name ${table} `), error.message)
    assert.ok(
      error.message.includes(`dynamodb://${table}?`) && error.message.includes('createTable=true'),
      error.message,
    )
    assert.match(error.message, /let fencelock create it: createTable=true in the URL/)
  })

  it('a numeric or composite key fails every call with the "run fencelock doctor" hint', async () => {
    const numeric = freshTable()
    await client.send(
      new CreateTableCommand({
        TableName: numeric,
        AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'N' }],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    )
    const composite = freshTable()
    await client.send(
      new CreateTableCommand({
        TableName: composite,
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    )
    for (const table of [numeric, composite]) {
      const driver = driverOf(table)
      for (const call of [
        () => driver.read('k', signal),
        () => driver.create('k', 'x', signal),
        () => driver.replace('k', 'x', 'v', signal),
      ]) {
        const error = await unavailable(call())
        assert.equal(error.retryable, false, error.message)
        assert.match(
          error.message,
          /ValidationException .*: run fencelock doctor/,
          `${table}: ${error.message}`,
        )
      }
    }
  })

  it('fails retryably, in words, when nothing answers', async () => {
    const port = await freePort()
    const nowhere = localClient(`http://127.0.0.1:${port}`, { maxAttempts: 1 })
    try {
      const error = await unavailable(driverOf(freshTable(), { via: nowhere }).read('k', signal))
      assert.equal(error.retryable, true)
      assert.match(error.message, /connection refused/)
      assert.equal(error.key, 'k')
    } finally {
      nowhere.destroy()
    }
  })

  it('rejects with the signal’s reason when aborted', async () => {
    const driver = driverOf(freshTable())
    const reason = new Error('given up')
    await assert.rejects(driver.read('k', AbortSignal.abort(reason)), (e) => e === reason)
    await assert.rejects(driver.create('k', 'x', AbortSignal.abort(reason)), (e) => e === reason)
  })

  it('holds keys up to 2048 bytes of UTF-8, DynamoDB’s limit for a partition key', async () => {
    const driver = driverOf(freshTable())
    assert.equal(driver.limits.maxKeyBytes, 2048)
    const key = 'é'.repeat(1024)
    assert.ok((await driver.create(key, 'long', signal)).ok)
    assert.equal((await driver.read(key, signal))?.body, 'long')
  })

  it('doctor: the table and conditional writes check out on DynamoDB Local, and the probe item is gone', async () => {
    const table = freshTable()
    const driver = driverOf(table)
    const findings = await driver.doctor(signal)
    assert.deepEqual(
      findings.map((f) => f.level),
      ['info', 'ok', 'ok'],
      JSON.stringify(findings),
    )
    assert.match(
      findings[0]!.message,
      /did not exist in region us-east-1: created it .*createTable=true asked/,
    )
    assert.match(findings[1]!.message, /enforces attribute_not_exists\(pk\) and version = :read/)
    const again = await driver.doctor(signal)
    assert.deepEqual(
      again.map((f) => f.level),
      ['ok', 'ok', 'ok'],
    )
    assert.match(again[0]!.message, /key "pk" \(string\), PAY_PER_REQUEST, ACTIVE/)
    assert.match(again[0]!.message, /lock names kept: about \d+ \(its ItemCount/)
    const { Count } = await client.send(new sdk.ScanCommand({ TableName: table, Select: 'COUNT' }))
    assert.equal(Count, 0)
  })

  it('doctor: an error naming the server when it ignores condition expressions', async () => {
    const proxy = await startLaxProxy(server.port)
    const lax = localClient(proxy.endpoint, { maxAttempts: 1 })
    try {
      const driver = new DynamoDbCasAdapter(
        {
          client: lax,
          table: freshTable(),
          createTable: true,
          id: 'dynamodb://lax',
          owned: false,
          endpoint: proxy.endpoint,
        },
        async () => sdk,
      )
      const findings = await driver.doctor(signal)
      const errors = findings.filter((f) => f.level === 'error')
      assert.equal(errors.length, 2, JSON.stringify(findings))
      assert.ok(errors[0]!.message.includes(`(server: ${proxy.endpoint}) ignores attribute_not_exists(pk)`))
      assert.match(errors[1]!.message, /ignores version = :read/)
    } finally {
      lax.destroy()
      await proxy.close()
    }
  })

  it('never closes a client it did not make; closes one it made', async () => {
    const own = localClient(server.endpoint, { maxAttempts: 1 })
    // The SDK's destroy() leaves a client usable (it only drops its sockets): count the calls instead.
    let destroyed = 0
    const destroy = own.destroy.bind(own)
    own.destroy = () => {
      destroyed++
      destroy()
    }
    try {
      await driverOf(freshTable(), { via: own }).close()
      assert.equal(destroyed, 0)
      const made = { client: own, table: freshTable(), createTable: true, id: 'made', owned: true }
      await new DynamoDbCasAdapter(made, async () => sdk).close()
      assert.equal(destroyed, 1)
    } finally {
      destroy()
    }
  })
})
