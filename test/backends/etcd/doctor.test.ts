/** `fencelock doctor` on etcd: the server, and how many keys live under the prefix (counted, not listed). */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createLockClient } from '../../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../../src/schemes.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'

describe('etcd: doctor', { timeout: 120_000 }, () => {
  let cluster: EtcdCluster
  before(async () => {
    cluster = await startEtcd(1)
  })
  after(async () => {
    await cluster?.destroy()
  })

  it('counts the keys under the prefix: one per holder, none once released', async () => {
    const url = `${cluster.url()}/doctor-count/`
    const backend = await loadBackend(parseBackendUrl(url))
    const locks = createLockClient(url, { ttl: '10s' })
    const text = async () =>
      (await backend.doctor!(AbortSignal.timeout(20_000))).map((f) => `${f.level}: ${f.message}`).join('\n')
    try {
      assert.match(await text(), /info: keys under "doctor-count\/": 0 /)
      const [a, b] = [await locks.acquire('a'), await locks.acquire('b')]
      assert.match(await text(), /info: keys under "doctor-count\/": 2 /)
      await a.release()
      await b.release()
      assert.match(await text(), /info: keys under "doctor-count\/": 0 /)
    } finally {
      await locks.close()
      await backend.close()
    }
  })
})
