/**
 * Redis over TLS, against a real redis-server listening on a TLS port only, with certificates made by the
 * test (a CA of its own): an ioredis client given the CA, a `rediss://` URL trusting the CA through
 * NODE_EXTRA_CA_CERTS (in a child process: Node reads it at start), and a `rediss://` URL refused while
 * the CA is not trusted.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { Redis } from 'ioredis'
import { redisBackend } from '../../src/backends/redis/index.js'
import { BackendUnavailableError, createLockClient } from '../../src/index.js'
import { type RedisServer, startRedis } from '../servers/redis.js'
import { makeCerts, type TestCerts } from '../support/certs.js'

const ENTRY = fileURLToPath(new URL('../../src/index.js', import.meta.url))

describe('redis: TLS', { timeout: 120_000 }, () => {
  let certs: TestCerts
  let server: RedisServer
  before(async () => {
    certs = await makeCerts()
    server = await startRedis({ tls: certs })
  })
  after(async () => {
    await server?.destroy()
    certs?.folder.cleanup()
  })

  it('locks over TLS with an ioredis client given the CA', async () => {
    const client = new Redis({ host: '127.0.0.1', port: server.port, tls: { ca: certs.ca } })
    const locks = createLockClient(redisBackend({ client }), { ttl: '10s' })
    try {
      const lock = await locks.acquire('tls-client', { timeout: '60s' })
      await lock.release()
    } finally {
      await locks.close()
      client.disconnect()
    }
  })

  it('locks over TLS with a rediss:// URL when NODE_EXTRA_CA_CERTS names the CA', async () => {
    assert.match(server.url, /^rediss:\/\//)
    const script = `
      const { createLockClient } = await import(${JSON.stringify(ENTRY)})
      const locks = createLockClient(${JSON.stringify(server.url)}, { ttl: '10s' })
      const lock = await locks.acquire('tls-url', { timeout: '60s' })
      console.log('fence', String(lock.fence))
      await lock.release()
      await locks.close()`
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: certs.caFile },
      timeout: 90_000,
    })
    assert.match(stdout, /^fence \d+$/m)
  })

  it('refuses the server while its CA is not trusted, saying the TLS handshake failed', async () => {
    const locks = createLockClient(server.url, { ttl: '10s' })
    try {
      await assert.rejects(locks.tryAcquire('tls-untrusted'), (error: Error) => {
        assert.ok(error instanceof BackendUnavailableError, String(error))
        assert.match(error.message, /rediss:\/\/127\.0\.0\.1:\d+.*TLS handshake.*certificate/)
        return true
      })
    } finally {
      await locks.close()
    }
  })
})
