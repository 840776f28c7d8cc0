/**
 * etcd over TLS, against a real etcd serving its clients over https only (`--cert-file/--key-file`), with
 * certificates made by the test (a CA of its own): an `Etcd3` client with https hosts and the CA as
 * `credentials.rootCertificate` locks.
 */
import { after, before, describe, it } from 'node:test'
import * as etcd3 from 'etcd3'
import { etcdBackend, etcdClientOptions } from '../../src/backends/etcd/index.js'
import { createLockClient } from '../../src/index.js'
import { type EtcdCluster, startEtcd } from '../servers/etcd.js'
import { makeCerts, type TestCerts } from '../support/certs.js'

describe('etcd: TLS', { timeout: 120_000 }, () => {
  let certs: TestCerts
  let etcd: EtcdCluster
  before(async () => {
    certs = await makeCerts()
    etcd = await startEtcd(1, { tls: certs })
  })
  after(async () => {
    await etcd?.destroy()
    certs?.folder.cleanup()
  })

  it('locks over https with the CA as rootCertificate', async () => {
    const client = new etcd3.Etcd3(
      etcdClientOptions(etcd3, {
        hosts: etcd.endpoints.split(','),
        credentials: { rootCertificate: certs.ca },
      }),
    )
    const locks = createLockClient(etcdBackend({ client }), { ttl: '10s' })
    try {
      const lock = await locks.acquire('tls-etcd', { timeout: '60s' })
      await lock.release()
    } finally {
      await locks.close()
      client.close()
    }
  })
})
