/**
 * PostgreSQL over TLS, against real servers with `ssl=on` and certificates made by the test (a CA of its
 * own): `sslmode=require` from a URL, a client given the CA, `verify-full` refused without it and
 * accepted with NODE_EXTRA_CA_CERTS (in a child process: Node reads it at start), and a
 * server without TLS said at once as such.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import postgres from 'postgres'
import { postgresBackend } from '../../src/backends/postgres/index.js'
import { BackendUnavailableError, createLockClient, type LockClient } from '../../src/index.js'
import { adminQuery } from '../kits/postgres.js'
import { type PostgresServer, startPostgres } from '../servers/postgres.js'
import { makeCerts, type TestCerts } from '../support/certs.js'

const ENTRY = fileURLToPath(new URL('../../src/index.js', import.meta.url))

describe('postgres: TLS', { timeout: 180_000 }, () => {
  let certs: TestCerts
  let tls: PostgresServer
  let plain: PostgresServer
  const open: LockClient[] = []
  const client = (...args: Parameters<typeof createLockClient>) => {
    const c = createLockClient(...args)
    open.push(c)
    return c
  }
  before(async () => {
    certs = await makeCerts()
    ;[tls, plain] = await Promise.all([
      startPostgres({ tls: { certFile: certs.certFile, keyFile: certs.keyFile } }),
      startPostgres(),
    ])
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await Promise.all([tls?.destroy(), plain?.destroy()])
    certs?.folder.cleanup()
  })

  /** How many client connections to `server` are encrypted now. */
  const encrypted = async (server: PostgresServer) =>
    Number(
      (await adminQuery<{ n: string }>(server, 'SELECT count(*)::text AS n FROM pg_stat_ssl WHERE ssl'))[0]
        ?.n,
    )

  it('locks over TLS with ?sslmode=require', async () => {
    const locks = client(tls.url('?sslmode=require'), { ttl: '10s' })
    const lock = await locks.acquire('tls-url', { timeout: '60s' })
    assert.ok((await encrypted(tls)) >= 1, 'no encrypted connection on the server')
    await lock.release()
  })

  it('locks over TLS with a client given the CA (certificate and host name checked)', async () => {
    const sql = postgres(tls.url(), { ssl: { ca: certs.ca }, max: 2, onnotice: () => {} })
    try {
      const locks = client(postgresBackend({ sql }), { ttl: '10s' })
      const lock = await locks.acquire('tls-ca', { timeout: '60s' })
      await lock.release()
      await locks.close()
    } finally {
      await sql.end({ timeout: 1 })
    }
  })

  it('refuses a server whose CA it does not trust (sslmode=verify-full, Node default CA store)', async () => {
    const locks = client(tls.url('?sslmode=verify-full'), { ttl: '10s' })
    await assert.rejects(locks.tryAcquire('tls-untrusted'), (error: Error) => {
      assert.ok(error instanceof BackendUnavailableError, String(error))
      assert.match(error.message, /on postgres:\/\/.*TLS handshake failed.*certificate/)
      return true
    })
  })

  it('locks with ?sslmode=verify-full when NODE_EXTRA_CA_CERTS names the CA', async () => {
    const script = `
      const { createLockClient } = await import(${JSON.stringify(ENTRY)})
      const locks = createLockClient(${JSON.stringify(tls.url('?sslmode=verify-full'))}, { ttl: '10s' })
      const lock = await locks.acquire('tls-verified', { timeout: '60s' })
      console.log('fence', String(lock.fence))
      await lock.release()
      await locks.close()`
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: certs.caFile },
      timeout: 90_000,
    })
    assert.match(stdout, /^fence \d+$/m)
  })

  it('says at once that a server without TLS does not accept it (sslmode=require), not "connection reset" until the timeout', async () => {
    const locks = client(plain.url('?sslmode=require'), { ttl: '10s' })
    // Far longer than the test's own timeout: only a permanent error ends this acquire in time.
    const acquired = locks.acquire('tls-refused', { timeout: '1h' })
    await assert.rejects(acquired, (error: Error) => {
      assert.ok(error instanceof BackendUnavailableError, String(error))
      assert.match(error.message, /on postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres\?sslmode=require: /)
      assert.match(error.message, /the server does not accept TLS.*sslmode=disable/)
      assert.equal(error.retryable, false)
      return true
    })
  })
})
