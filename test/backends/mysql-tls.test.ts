/**
 * MySQL/MariaDB over TLS, against a real MariaDB with `--ssl-cert/--ssl-key` and certificates made by the
 * test (a CA of its own): a mysql2 pool given the CA locks over an encrypted connection; a pool that does
 * not trust the CA is refused, the TLS failure named.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createPool } from 'mysql2/promise'
import { mysqlBackend } from '../../src/backends/mysql/index.js'
import { BackendUnavailableError, createLockClient } from '../../src/index.js'
import { MARIADB_DATABASE, type MariaDbServer, startMariaDb } from '../servers/mariadb.js'
import { makeCerts, type TestCerts } from '../support/certs.js'

describe('mysql: TLS (MariaDB 10.11)', { timeout: 120_000 }, () => {
  let certs: TestCerts
  let server: MariaDbServer
  const poolWith = (ssl: { ca?: Buffer }) =>
    createPool({
      host: '127.0.0.1',
      port: server.port,
      user: 'root',
      database: MARIADB_DATABASE,
      flags: ['-FOUND_ROWS'],
      ssl,
    })
  before(async () => {
    certs = await makeCerts()
    server = await startMariaDb({
      args: [`--ssl-cert=${certs.certFile}`, `--ssl-key=${certs.keyFile}`, `--ssl-ca=${certs.caFile}`],
    })
  })
  after(async () => {
    await server?.destroy()
    certs?.folder.cleanup()
  })

  it('locks over TLS with a pool given the CA', async () => {
    const pool = poolWith({ ca: certs.ca })
    const locks = createLockClient(mysqlBackend({ pool }), { ttl: '10s' })
    try {
      const lock = await locks.acquire('tls-ca', { timeout: '60s' })
      const [rows] = await pool.query("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
      assert.notEqual((rows as { Value: string }[])[0]?.Value ?? '', '', 'the connection is not encrypted')
      await lock.release()
    } finally {
      await locks.close()
      await pool.end()
    }
  })

  it('refuses the server while its CA is not trusted, naming the TLS failure', async () => {
    const pool = poolWith({})
    const locks = createLockClient(mysqlBackend({ pool }), { ttl: '10s' })
    try {
      await assert.rejects(locks.tryAcquire('tls-untrusted'), (error: Error) => {
        assert.ok(error instanceof BackendUnavailableError, String(error))
        assert.match(error.message, /TLS handshake failed.*certificate/)
        return true
      })
    } finally {
      await locks.close()
      await pool.end()
    }
  })
})
