import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { lockPrefix, semaphoreLimitKey, semaphorePrefix } from '../../../src/backends/etcd/layout.js'
import { LockLostError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil } from '../../support/wait.js'
import { etcdTestCluster } from './fixture.js'

/**
 * Counting semaphores on etcd, what the conformance cases cannot see: the keys on the store (the limit
 * and one entry per acquire, each on its lease, apart from locks), etcd's lease deciding expiry, the
 * sequence after etcd forgot an idle semaphore, and one watch per semaphore per client however many of
 * its acquires wait.
 */
const WITHIN = { withinMs: 30_000, everyMs: 50 }

describe('etcd: counting semaphores', { timeout: 240_000 }, () => {
  const etcd = etcdTestCluster()
  const clientOf = (options: { ttl?: string; holder?: string } = {}) =>
    etcd.client(etcd.backend(), {
      ttl: options.ttl ?? '10s',
      ...(options.holder === undefined ? {} : { holder: options.holder }),
    })
  /** Watchers open on the member now (its metrics). */
  const watchers = async () => {
    const text = await (await fetch(`http://${etcd.cluster.members[0]!.endpoint}/metrics`)).text()
    const line = text.split('\n').find((l) => l.startsWith('etcd_debugging_mvcc_watcher_total '))
    assert.ok(line, 'etcd reports its watchers')
    return Number(line.split(' ')[1])
  }

  it('keeps the limit and one entry per acquire, each on the lease of its session, apart from locks', async () => {
    const name = 'sem/layout'
    const locks = clientOf({ holder: 'render 1' })
    const held = await locks.semaphore(name, { limit: 3 }).acquire({ permits: 2 })
    const keys = await etcd.keysUnder(semaphorePrefix(name))
    assert.equal(keys.length, 2, `two keys: ${keys.map((k) => k.key).join(', ')}`)
    const limit = keys.find((k) => k.key === semaphoreLimitKey(name))
    assert.ok(limit, 'the limit key')
    assert.equal(limit.value, '3')
    const entry = keys.find((k) => k.key !== semaphoreLimitKey(name))!
    assert.match(entry.key.slice(semaphorePrefix(name).length), new RegExp(`^[0-9a-f]+-${held.owner}$`))
    assert.deepEqual(JSON.parse(entry.value), { owner: held.owner, permits: 2, limit: 3, holder: 'render 1' })
    assert.equal(entry.create, held.sequence, 'the sequence is the entry’s create revision')
    assert.notEqual(entry.lease, '0', 'the entry is on a lease')
    assert.equal(limit.lease, entry.lease, 'the limit is on the lease of the acquire that stored it')
    // No lock of that name, and the operator's listing sees no lock.
    assert.deepEqual(await etcd.keysUnder(lockPrefix(name)), [])
    const listed = []
    for await (const lock of locks.list('')) listed.push(lock)
    assert.deepEqual(listed, [])
    await held.release()
    assert.deepEqual(
      (await etcd.keysUnder(semaphorePrefix(name))).map((k) => k.key),
      [semaphoreLimitKey(name)],
      'the release deleted the entry',
    )
  })

  it('frees the permits of a holder whose lease etcd ends, and tells the holder', async () => {
    const name = 'sem/expiry'
    const [a, b] = [clientOf(), clientOf()]
    const stale = await a.semaphore(name, { limit: 1 }).acquire()
    const next = awaitLater(b.semaphore(name, { limit: 1 }).acquire({ timeout: '60s' }))
    await pollUntil(
      () => b.semaphore(name, { limit: 1 }).inspect(),
      (view) => view.waiting === 1,
      WITHIN,
    )
    // What etcd does when the holder's process dies and its lease runs out: the entry goes with it.
    const entry = (await etcd.keysUnder(semaphorePrefix(name))).find(
      (k) => k.key !== semaphoreLimitKey(name),
    )!
    await etcd.admin.leaseClient.leaseRevoke({ ID: entry.lease })
    const granted = await next
    assert.ok(granted.sequence > stale.sequence)
    await pollUntil(
      async () => stale.signal.aborted,
      (aborted) => aborted,
      WITHIN,
    )
    assert.ok(stale.signal.reason instanceof LockLostError, `${stale.signal.reason}`)
    await granted.release()
  })

  it('forgets an idle semaphore entirely, and the next grant after it has a higher sequence', async () => {
    const name = 'sem/forgotten'
    const first = clientOf()
    const held = await first.semaphore(name, { limit: 2 }).acquire()
    await held.release()
    // Closing revokes the client's leases: its limit key goes with its session, nothing is left.
    await first.close()
    assert.deepEqual(await etcd.keysUnder(semaphorePrefix(name)), [])
    const later = clientOf()
    // Nothing is stored, so this client's limit is the one stored now.
    const again = await later.semaphore(name, { limit: 5 }).acquire()
    assert.ok(again.sequence > held.sequence, `${again.sequence} after ${held.sequence}`)
    assert.equal((await later.semaphore(name, { limit: 5 }).inspect()).limit, 5)
    await again.release()
  })

  it('serves the line in order: a small request does not pass a larger one waiting ahead of it', async () => {
    const name = 'sem/fifo'
    const [a, b, c] = [clientOf(), clientOf(), clientOf()]
    const two = await a.semaphore(name, { limit: 3 }).acquire({ permits: 2 })
    const large = awaitLater(b.semaphore(name, { limit: 3 }).acquire({ permits: 2, timeout: '60s' }))
    await pollUntil(
      () => a.semaphore(name, { limit: 3 }).inspect(),
      (view) => view.waiting === 1,
      WITHIN,
    )
    // One permit is free, but the request for two came first: it is not starved by single permits.
    assert.equal(await c.semaphore(name, { limit: 3 }).tryAcquire(), null)
    await two.release()
    const granted = await large
    const one = await c.semaphore(name, { limit: 3 }).tryAcquire()
    assert.ok(one, 'the permit left beside the two is free')
    await Promise.all([granted.release(), one.release()])
  })

  it('watches a semaphore once per client, however many of its acquires wait', async () => {
    const name = 'sem/one-watch'
    const [a, b] = [clientOf(), clientOf()]
    const held = await a.semaphore(name, { limit: 1 }).acquire()
    const before = await watchers()
    const waiting = [0, 1, 2, 3, 4].map(() =>
      awaitLater(b.semaphore(name, { limit: 1 }).acquire({ timeout: '60s' })),
    )
    await pollUntil(
      () => a.semaphore(name, { limit: 1 }).inspect(),
      (view) => view.waiting === 5,
      WITHIN,
    )
    // Every waiter has armed its wait at least once by now (each polls about once a second).
    await new Promise((resolve) => setTimeout(resolve, 3000))
    assert.equal((await watchers()) - before, 1, 'one watch for five waiters of one client')
    await held.release()
    // Granted one at a time, in any order: each gives its permit back as soon as it has it.
    await Promise.all(waiting.map(async (next) => (await next).release()))
  })
})
