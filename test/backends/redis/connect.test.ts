import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import * as ioredis from 'ioredis'
import { connect } from '../../../src/backends/redis/connect.js'

/** The options `connect` gives the client for `url`; the client is closed before it reaches anyone. */
function optionsOf(url: string, options: Parameters<typeof connect>[2] = {}) {
  const { client } = connect(ioredis, new URL(url), options)
  client.disconnect()
  assert.ok(client instanceof ioredis.Redis)
  return client.options
}

describe('redis connect: a URL to ioredis options', () => {
  it('takes host, port, database, credentials and TLS from the URL, with the failure policy', () => {
    const o = optionsOf('rediss://us%40er:p%3Ass@[::1]:6390/3')
    assert.equal(o.host, '::1')
    assert.equal(o.port, 6390)
    assert.equal(o.db, 3)
    assert.equal(o.username, 'us@er')
    assert.equal(o.password, 'p:ss')
    assert.deepEqual(o.tls, {})
    assert.equal(o.maxRetriesPerRequest, 1)
    assert.equal(o.connectTimeout, 5000)
  })

  it('defaults to 127.0.0.1:6379, database 0, no credentials and no TLS', () => {
    const o = optionsOf('redis://')
    assert.equal(o.host, '127.0.0.1')
    assert.equal(o.port, 6379)
    assert.equal(o.db, 0)
    assert.ok(!o.username && !o.password, 'no credentials')
    assert.equal(o.tls, undefined)
  })

  it("serves one node of a multi-host URL (Redlock's), with the URL's credentials and the caller's options", () => {
    const o = optionsOf('redlock://:secret@h1:7001', {
      node: '[::1]:7002',
      extra: { enableOfflineQueue: false, autoResendUnfulfilledCommands: false },
    })
    assert.equal(o.host, '::1')
    assert.equal(o.port, 7002)
    assert.equal(o.password, 'secret')
    assert.equal(o.tls, undefined, 'only rediss: means TLS')
    assert.equal(o.enableOfflineQueue, false)
    assert.equal(o.autoResendUnfulfilledCommands, false)
  })

  it('waits for the database of the URL to be selected only when it is not 0', () => {
    for (const [url, selects] of [
      ['redis://127.0.0.1:1/0', false],
      ['redis://127.0.0.1:1', false],
      ['redis://127.0.0.1:1/2', true],
    ] as const) {
      const { client, ready } = connect(ioredis, new URL(url))
      ready?.catch(() => {})
      client.disconnect()
      assert.equal(ready !== undefined, selects, url)
    }
  })

  it('refuses a path that is not a database number, naming it', () => {
    assert.throws(() => connect(ioredis, new URL('redis://127.0.0.1/abc')), /database number .*"\/abc"/)
  })

  it('seeds a Cluster with the node, passing the options to each of its connections', () => {
    const { client } = connect(ioredis, new URL('redis://:pw@127.0.0.1:7005'), { cluster: true })
    client.disconnect()
    assert.ok(client instanceof ioredis.Cluster)
    assert.equal(client.options.redisOptions?.password, 'pw')
    assert.equal(client.options.redisOptions?.maxRetriesPerRequest, 1)
  })
})
