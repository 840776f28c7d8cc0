/**
 * The DynamoDB backend as users meet it: the `dynamodb://` URL (what it takes and refuses), the item a lock
 * leaves in the table (read raw, through layout.ts), the fence kept by a release, a missing table (never
 * made unless asked; a client of another region fails at once, on a DynamoDB Local without `-sharedDb`),
 * a key longer than DynamoDB takes, the user's own client left open, and `fencelock doctor` (also on a
 * server that ignores condition expressions, and making the table with `createTable=true`).
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { GetItemCommand, ListTablesCommand } from '@aws-sdk/client-dynamodb'
import { ATTR, dynamodbBackend, fromUrl, itemKey } from '../../../src/backends/dynamodb/index.js'
import { decodeRecord } from '../../../src/engines/cas/record.js'
import { BackendUnavailableError, createLockClient } from '../../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../../src/schemes.js'
import { makeTable, TABLE } from '../../kits/dynamodb.js'
import {
  type DynamoDbServer,
  LOCAL_REGION,
  localClient,
  startDynamoDb,
  startLaxProxy,
  useLocalCredentials,
} from '../../servers/dynamodb.js'
import { runCli } from '../../support/processes.js'

describe('dynamodb:// URLs', () => {
  const refuses = (url: string, pattern: RegExp) =>
    assert.rejects(
      () => fromUrl(new URL(url)),
      (error: Error) => {
        assert.ok(error instanceof TypeError, String(error))
        assert.match(error.message, pattern)
        return true
      },
    )

  it('refuses what it does not take, saying what it expected', async () => {
    await refuses('dynamodb://locks?regoin=eu-west-1', /Unknown parameter "regoin".*did you mean "region"/)
    await refuses('dynamodb://locks?createTable=maybe', /`createTable` .* true or false/)
    await refuses('dynamodb://key:secret@locks', /no user or password .* AWS SDK/)
    await refuses('dynamodb://locks/more', /no path/)
    await refuses('dynamodb://ab', /table name \(3 to 255 .*"ab"/)
    await refuses('dynamodb://lo%20cks', /table name/)
    await refuses('dynamodb://locks?endpoint=127.0.0.1:8000', /`endpoint` .* an http\(s\) URL/)
  })

  it('is served by the scheme table, keeps the table name’s case, and names the store by its URL', async () => {
    const backend = await loadBackend(parseBackendUrl('dynamodb://My_Locks.v-1?region=eu-west-1'))
    try {
      assert.equal(backend.id, 'dynamodb://My_Locks.v-1?region=eu-west-1')
      assert.deepEqual(backend.capabilities, { expiry: 'observed', notify: false, fifo: false })
      assert.equal(backend.limits?.maxKeyBytes, 2048)
    } finally {
      await backend.close()
    }
  })
})

describe('dynamodb backend on DynamoDB Local', { timeout: 120_000 }, () => {
  let server: DynamoDbServer
  const url = (table: string, query = '') =>
    `dynamodb://${table}?endpoint=${server.endpoint}&region=${LOCAL_REGION}${query}`

  before(async () => {
    useLocalCredentials()
    server = await startDynamoDb()
    const admin = localClient(server.endpoint)
    await makeTable(admin).finally(() => admin.destroy())
  })
  after(() => server?.destroy())

  it('keeps one item per lock: pk, the record and a version; a release keeps it released, fence and all, until it is retired', async () => {
    const admin = localClient(server.endpoint)
    const locks = createLockClient(url(TABLE), { ttl: '10s' })
    const item = async (key: string) => {
      const { Item } = await admin.send(
        new GetItemCommand({ TableName: TABLE, Key: itemKey(key), ConsistentRead: true }),
      )
      return { item: Item!, record: decodeRecord(Item![ATTR.record]!.S!)! }
    }
    try {
      const first = await locks.acquire('orders/42', { holder: 'backend test' })
      const held = await item('orders/42')
      assert.deepEqual(Object.keys(held.item).sort(), ['pk', 'record', 'version'])
      assert.equal(held.item.pk!.S, 'orders/42')
      assert.equal(held.record.state, 'held')
      assert.equal(held.record.fence, first.fence)
      assert.equal(held.record.holder, 'backend test')
      await first.release()
      // Released with its fence, unless already retired (a slow run: the store's clock allowed it).
      const { Item: left } = await admin.send(
        new GetItemCommand({ TableName: TABLE, Key: itemKey('orders/42'), ConsistentRead: true }),
      )
      if (left !== undefined) {
        const released = decodeRecord(left[ATTR.record]!.S!)!
        assert.equal(released.state, 'released')
        assert.equal(released.fence, first.fence)
        assert.notEqual(left[ATTR.version]!.S, held.item.version!.S)
      }
      const second = await locks.acquire('orders/42')
      assert.ok(second.fence > first.fence, `${second.fence} > ${first.fence}`)
      await second.release()
    } finally {
      await locks.close()
      admin.destroy()
    }
  })

  it('never makes a missing table unless asked: fails at once naming region, table and how to create it', async () => {
    const locks = createLockClient(url('no-such-table'), { ttl: '10s' })
    const admin = localClient(server.endpoint)
    try {
      const started = performance.now()
      // A wait of a minute: the error is not retryable, so the acquire does not wait it out.
      await assert.rejects(locks.acquire('k', { timeout: '60s' }), (error: Error) => {
        assert.ok(error instanceof BackendUnavailableError, String(error))
        assert.equal(error.retryable, false)
        assert.match(error.message, /table "no-such-table" does not exist in region us-east-1/)
        assert.match(
          error.message,
          /aws dynamodb create-table --table-name no-such-table .* --region us-east-1/,
        )
        assert.match(
          error.message,
          /fencelock doctor 'dynamodb:\/\/no-such-table\?region=us-east-1&endpoint=.*&createTable=true'/,
        )
        return true
      })
      assert.ok(performance.now() - started < 30_000, 'failed at once, not at the deadline')
      const { TableNames } = await admin.send(new ListTablesCommand({}))
      assert.ok(!TableNames?.includes('no-such-table'), 'no table was made')
    } finally {
      await locks.close()
      admin.destroy()
    }
  })

  it('refuses a key longer than 2048 bytes before any request, and takes one of 2048', async () => {
    const client = localClient(server.endpoint)
    // The SDK's destroy() leaves a client usable (it only drops its sockets): count the calls instead.
    let destroyed = 0
    const destroy = client.destroy.bind(client)
    client.destroy = () => {
      destroyed++
      destroy()
    }
    const locks = createLockClient(dynamodbBackend({ client, table: TABLE }), { ttl: '10s' })
    try {
      await assert.rejects(locks.acquire('k'.repeat(2049)), (error: Error) => {
        assert.ok(error instanceof TypeError)
        assert.match(error.message, /at most 2048 bytes of UTF-8 on dynamodb:\/\/fencelock-tests/)
        return true
      })
      const lock = await locks.acquire('k'.repeat(2048))
      await lock.release()
    } finally {
      await locks.close()
      assert.equal(destroyed, 0, 'the user’s client is never closed by fencelock')
      destroy()
    }
  })

  it('fencelock doctor: ok on DynamoDB Local, an error naming the server when it ignores conditions', async () => {
    const missing = await runCli(['doctor', url('doctor-table')])
    assert.notEqual(missing.code, 0, missing.stdout + missing.stderr)
    assert.match(missing.stdout + missing.stderr, /"doctor-table" does not exist in region us-east-1/)
    // Asked to: the missing table is made (by the CLI's first read, or by doctor itself).
    const made = await runCli(['doctor', url('doctor-table', '&createTable=true')])
    assert.equal(made.code, 0, made.stdout + made.stderr)
    const good = await runCli(['doctor', url('doctor-table')])
    assert.equal(good.code, 0, good.stdout + good.stderr)
    assert.match(good.stdout, /^ok +Table "doctor-table": key "pk" \(string\), PAY_PER_REQUEST, ACTIVE/m)
    assert.match(good.stdout, /^ok +.*enforces attribute_not_exists\(pk\) and version = :read/m)
    const proxy = await startLaxProxy(server.port)
    try {
      const laxUrl = `dynamodb://doctor-table?endpoint=${proxy.endpoint}&region=${LOCAL_REGION}`
      const lax = await runCli(['doctor', laxUrl])
      assert.equal(lax.code, 69, lax.stdout + lax.stderr)
      assert.match(
        lax.stdout,
        /^error +dynamodb:\/\/doctor-table\?.*\(server: http:\/\/127\.0\.0\.1:\d+\) ignores attribute_not_exists/m,
      )
    } finally {
      await proxy.close()
    }
  })
})

describe(
  'dynamodb backend on DynamoDB Local without -sharedDb (a database per region, as on AWS)',
  {
    timeout: 120_000,
  },
  () => {
    let server: DynamoDbServer
    before(async () => {
      useLocalCredentials()
      server = await startDynamoDb({ sharedDb: false })
    })
    after(() => server?.destroy())

    it('a client pointed at another region fails at once; it neither makes a table nor gets the lock', async () => {
      const urlIn = (region: string) => `dynamodb://${TABLE}?endpoint=${server.endpoint}&region=${region}`
      const home = localClient(server.endpoint)
      const away = localClient(server.endpoint, { region: 'eu-west-1' })
      await makeTable(home)
      const right = createLockClient(urlIn(LOCAL_REGION), { ttl: '30s' })
      const wrong = createLockClient(urlIn('eu-west-1'), { ttl: '30s' })
      try {
        const held = await right.acquire('orders/42')
        await assert.rejects(wrong.acquire('orders/42', { timeout: '60s' }), (error: Error) => {
          assert.ok(error instanceof BackendUnavailableError, String(error))
          assert.equal(error.retryable, false)
          assert.match(error.message, /table "fencelock-tests" does not exist in region eu-west-1/)
          assert.match(error.message, /--region eu-west-1/)
          return true
        })
        const { TableNames } = await away.send(new ListTablesCommand({}))
        assert.deepEqual(TableNames, [], 'no table was made in the wrong region')
        await held.release()
      } finally {
        await Promise.all([right.close(), wrong.close()])
        home.destroy()
        away.destroy()
      }
    })
  },
)
