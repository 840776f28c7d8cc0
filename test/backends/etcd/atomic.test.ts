/**
 * etcd's atomic multi-key step, one transaction over the keys' lines: the range compare it rests on (an
 * empty line compares as a zero key-value), and a transaction whose reply is lost, taken by etcd: the
 * next attempt is granted the keys it finds already ours, and an acquisition that gives up after such
 * replies leaves no key held, while its client lives on and keeps its sessions alive; a set larger than
 * etcd takes in one transaction fails at once, saying so.
 */
import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import * as etcd3 from 'etcd3'
import { etcdBackend } from '../../../src/backends/etcd/index.js'
import { prefixEnd } from '../../../src/backends/etcd/layout.js'
import { BackendUnavailableError } from '../../../src/index.js'
import { etcdTestCluster } from './fixture.js'

describe('etcd: atomic multi-key acquisition in one transaction', { timeout: 120_000 }, () => {
  const etcd = etcdTestCluster()
  /** The etcd3 clients of the backends below: closed after the lock clients over them (the fixture's). */
  const raw: etcd3.Etcd3[] = []
  after(() => {
    for (const client of raw) client.close()
  })

  /** A backend whose atomic transactions reach etcd but lose their replies while `lose()` says so. */
  const losing = (lose: () => boolean) => {
    const client = new etcd3.Etcd3({ hosts: etcd.cluster.endpoints })
    raw.push(client)
    const txn = client.kv.txn.bind(client.kv)
    let lost = 0
    client.kv.txn = async (req) => {
      const reply = await txn(req)
      // The set's transaction is the one comparing whole ranges (the lines' prefixes).
      const atomic = req.compare?.some((compare) => compare.range_end !== undefined)
      if (atomic && lose()) {
        lost++
        throw new Error('connection reset (the reply was lost)')
      }
      return reply
    }
    return { backend: etcdBackend({ client }), lost: () => lost }
  }

  it('version = 0 over a prefix holds only while no key is under it', async () => {
    const prefix = 'atomic-compare/line/'
    const empty = () =>
      etcd.admin.kv.txn({
        compare: [
          {
            target: 'Version',
            result: 'Equal',
            key: Buffer.from(prefix),
            range_end: prefixEnd(prefix),
            version: 0,
          },
        ],
        success: [],
        failure: [],
      })
    assert.equal((await empty()).succeeded, true, 'an empty line compares as a zero key-value')
    await etcd.admin.put(`${prefix}a`).value('x')
    assert.equal((await empty()).succeeded, false, 'a key in the line fails the compare')
    await etcd.admin.delete().key(`${prefix}a`)
    assert.equal((await empty()).succeeded, true, 'empty again once it is deleted')
  })

  it('a lost reply is granted by the next attempt; giving up after lost replies leaves no key held', async () => {
    const keys = ['atomic-lost:a', 'atomic-lost:b', 'atomic-lost:c']
    const observer = etcd.client(etcd.backend(), { ttl: '30s' })

    let first = true
    const once = losing(() => {
      const lose = first
      first = false
      return lose
    })
    const all = await etcd
      .client(once.backend, { ttl: '30s' })
      .acquireAll(keys, { atomic: true, timeout: '20s' })
    assert.equal(once.lost(), 1, 'the first reply was lost')
    for (const key of keys) assert.equal((await observer.inspect(key)).owner, all.locks.get(key)!.owner)
    await all.release()

    const never = losing(() => true)
    const locks = etcd.client(never.backend, { ttl: '30s' })
    await assert.rejects(locks.acquireAll(keys, { atomic: true, timeout: '2s' }), BackendUnavailableError)
    assert.ok(never.lost() >= 1, 'etcd took at least one transaction whose reply was lost')
    // Its client is still open, its sessions kept alive: only the clean-up can have freed the keys.
    for (const key of keys) {
      const next = await observer
        .acquire(key, { timeout: '5s' })
        .catch((error: unknown) => assert.fail(`${key} stayed held after the lost replies: ${error}`))
      await next.release()
    }
    for (const key of keys)
      assert.deepEqual(await etcd.keysUnder(`fencelock/${key}/`), [], `${key}: no entry left`)
  })

  it("a set above etcd's --max-txn-ops fails at its first attempt, naming the setting", async () => {
    // 129 keys: 129 compares, puts and ranges in one transaction, one more than etcd's default allows.
    const keys = Array.from({ length: 129 }, (_, i) => `atomic-many:${String(i).padStart(3, '0')}`)
    const locks = etcd.client(etcd.backend(), { ttl: '30s' })
    await assert.rejects(locks.acquireAll(keys, { atomic: true, timeout: '30s' }), (error: unknown) => {
      assert.ok(error instanceof BackendUnavailableError, `${error}`)
      assert.equal(error.retryable, false, 'no retry makes the transaction smaller')
      assert.match(error.message, /--max-txn-ops/)
      return true
    })
    for (const key of [keys[0]!, keys[128]!])
      assert.deepEqual(await etcd.keysUnder(`fencelock/${key}/`), [], `${key}: nothing taken`)
  })
})
