/**
 * Resuming a lock on etcd, beside the conformance cases: a resumable lock is on a lease of its own, so the
 * process that resumes it keeps no other lock of the original client alive; the resumed lease's loss
 * aborts the resumer's `lock.signal` when etcd knows it, not at its validity's end; the fence, the key's
 * create revision, is the original's; and a lock acquired without `resumable` gives no token.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { Etcd3 } from 'etcd3'
import { etcdBackend } from '../../../src/backends/etcd/index.js'
import {
  CapabilityError,
  type ClientOptions,
  createLockClient,
  type LockClient,
  LockLostError,
} from '../../../src/index.js'
import { sleep } from '../../support/time.js'
import { abortedWithin } from '../../support/wait.js'
import { etcdTestCluster } from './fixture.js'

describe('etcd: resume', { timeout: 180_000 }, () => {
  const etcd = etcdTestCluster()
  const client = (options: ClientOptions = {}) => etcd.client(etcd.backend(), options)
  /** The key of lock `key` held by `owner`, as etcd has it. */
  const keyOf = async (key: string, owner: string) =>
    (await etcd.keysUnder(`fencelock/${key}/`)).find((found) => found.key.endsWith(`-${owner}`))

  it('resuming one lock keeps no other lock of the original client alive; the fence is unchanged', async () => {
    // The original client on an etcd client of the test's own, so that it can die without a word: its
    // keep-alives stop, nothing is revoked, as when its process is killed.
    const raw = new Etcd3({ hosts: etcd.cluster.endpoints })
    const original = createLockClient(etcdBackend({ client: raw }), { ttl: '2s', renew: false })
    try {
      await aloneAndDead(raw, original)
    } finally {
      raw.close()
      await original.close()
    }
  })

  /** The first case's steps, the original client on `etcd` (closed by the case). */
  async function aloneAndDead(raw: Etcd3, original: LockClient) {
    const handed = await original.acquire('resume-alone', { resumable: true })
    const kept = await original.acquire('resume-other')
    const stored = await keyOf('resume-alone', handed.owner)
    assert.equal(stored?.create, handed.fence, "the fence is the key's create revision")
    assert.notEqual(stored?.lease, (await keyOf('resume-other', kept.owner))?.lease, 'a lease of its own')

    const resumed = await client({ ttl: '2s' }).resume(handed.token())
    assert.equal(resumed.fence, handed.fence)
    raw.close()
    // Three ttls: the other lock's lease has expired unless the resumer's renewals keep it alive.
    await sleep(6000)
    const other = client()
    const next = await other.tryAcquire('resume-other')
    assert.ok(next, 'the lock of the dead client was freed by its lease: the resumer kept it not alive')
    assert.ok(next.fence > kept.fence)
    await next.release()
    assert.equal(resumed.signal.aborted, false, `the resumed lock is held: ${resumed.signal.reason}`)
    assert.equal(await other.tryAcquire('resume-alone'), null)
    assert.equal(
      (await keyOf('resume-alone', handed.owner))?.create,
      handed.fence,
      'the same key, same fence',
    )
    await resumed.release()
    const free = await other.tryAcquire('resume-alone')
    assert.ok(free && free.fence > handed.fence)
    await free.release()
  }

  it("the resumed lease's end aborts the resumer's lock.signal when etcd knows it", async () => {
    const handed = await client({ ttl: '30s' }).acquire('resume-lost', { resumable: true })
    // No renewal before the lease's end: only etcd's word can abort the signal within the bound.
    const resumed = await client({ ttl: '30s', renew: false }).resume(handed.token())
    const stored = await keyOf('resume-lost', handed.owner)
    assert.ok(stored)
    await etcd.admin.leaseClient.leaseRevoke({ ID: stored.lease })
    await abortedWithin(resumed.signal, 15_000)
    assert.ok(resumed.signal.reason instanceof LockLostError, `${resumed.signal.reason}`)
    await abortedWithin(handed.signal, 15_000)
  })

  it('a lock acquired without resumable gives no token, and is still released by close', async () => {
    const locks = createLockClient(etcd.backend())
    const lock = await locks.acquire('resume-refused')
    assert.throws(
      () => lock.token(),
      (error: unknown) =>
        error instanceof CapabilityError &&
        /resumable: true/.test(error.message) &&
        /resume-refused/.test(error.message),
    )
    await locks.close()
    assert.ok(lock.signal.aborted)
    assert.equal(await keyOf('resume-refused', lock.owner), undefined, 'released by close, not left')
  })
})
