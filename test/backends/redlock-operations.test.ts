/**
 * Redlock's `list` and `break` where the conformance case does not reach: a node that stopped answering
 * (list and break still work from the majority; the holder's next renewal fails), the waiter woken by a
 * break on its client's channel, a break aimed at a grant that another has replaced, and a key with a brace.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisLockKeys } from '../../src/backends/redis/mutex/layout.js'
import { lineKeys } from '../../src/backends/redlock/layout.js'
import { createLockClient, type ListedLock, type LockClient, LockLostError } from '../../src/index.js'
import { type RedisNodes, startRedisNodes } from '../servers/redis.js'
import { awaitLater } from '../support/later.js'
import { abortedWithin, pollUntil } from '../support/wait.js'

let nodes: RedisNodes
const clients: LockClient[] = []
const redises: Redis[] = []
const run = randomBytes(3).toString('hex')
const client = (options: Parameters<typeof createLockClient>[1] = {}) => {
  const c = createLockClient(nodes.url('?restartDelay=0'), options)
  clients.push(c)
  return c
}

async function listed(list: AsyncIterable<ListedLock>): Promise<ListedLock[]> {
  const found: ListedLock[] = []
  for await (const lock of list) found.push(lock)
  return found
}

before(async () => {
  nodes = await startRedisNodes(3)
})
after(async () => {
  await Promise.all(clients.map((c) => c.close()))
  for (const r of redises) r.disconnect()
  await nodes.destroy()
})

describe('redlock list and break', { timeout: 120_000 }, () => {
  it('lists and breaks with a node that stopped answering; the holder loses the lock at its renewal', async () => {
    const k = `paused-${run}/a b`
    // A lease long enough to need no renewal while the node is paused and the listing waits for it.
    const holder = client({ ttl: '20s' })
    const stuck = await holder.acquire(k, { holder: 'stuck' })
    // Pause a node the hold can spare: the hold may be on only two nodes (a third answered late), and
    // with one of those paused nobody can see a majority hold it.
    const admin = nodes.servers.map((s) => new Redis(s.port, '127.0.0.1'))
    redises.push(...admin)
    const holds = await Promise.all(admin.map((r) => r.get(redisLockKeys(k).lock)))
    const spare = Math.max(0, holds.indexOf(null))
    const paused = nodes.servers[spare]!
    paused.signal('SIGSTOP')
    try {
      const operator = client()
      const found = await listed(operator.list(`paused-${run}`))
      assert.deepEqual(
        found.map((l) => [l.key, l.owner, l.holder]),
        [[k, stuck.owner, 'stuck']],
      )
      const broken = await operator.break(k)
      assert.equal(broken.broken, true, 'broken on the two nodes that answer')
      assert.equal(broken.lease?.owner, stuck.owner)
      await abortedWithin(stuck.signal, 30_000)
      assert.ok(stuck.signal.reason instanceof LockLostError, `lost: ${stuck.signal.reason}`)
    } finally {
      paused.signal('SIGCONT')
    }
  })

  it('a break wakes the first waiter on its own channel, as a release does', async () => {
    const k = `wake-${run}`
    const [holder, waiter, operator] = [client({ ttl: '60s' }), client(), client()]
    await holder.acquire(k)
    const subscribers = nodes.servers.map((s) => new Redis(s.port, '127.0.0.1'))
    redises.push(...subscribers)
    const heard: string[] = []
    for (const sub of subscribers) {
      sub.on('pmessage', (_p: string, _channel: string, message: string) => heard.push(message))
      await sub.psubscribe('fencelock:!wake:*')
    }
    const admin = nodes.servers.map((s) => new Redis(s.port, '127.0.0.1'))
    redises.push(...admin)
    const next = awaitLater(waiter.acquire(k, { timeout: '60s' }))
    // The waiter stands in line on the nodes before the break.
    await pollUntil(
      () => Promise.all(admin.map((r) => r.zcard(lineKeys(k).line))),
      (lines) => lines.filter((n) => n > 0).length >= 2,
      { withinMs: 20_000 },
    )
    assert.equal((await operator.break(k)).broken, true)
    const taken = await next
    assert.ok(heard.includes(taken.owner), `the break named the waiter (heard: ${heard.join(', ')})`)
    await taken.release()
  })

  it('a break aimed at a replaced grant leaves the new holder; one aimed at it ends it', async () => {
    const k = `aimed-${run}`
    const [first, second, operator] = [client(), client(), client()]
    const old = await first.acquire(k)
    const admin = nodes.servers.map((s) => new Redis(s.port, '127.0.0.1'))
    redises.push(...admin)
    // The old grant ends behind its holder's back on every node (as an expiry would); the counters stay.
    await Promise.all(admin.map((r) => r.del(redisLockKeys(k).lock)))
    const taken = await second.acquire(k, { timeout: '30s' })
    assert.ok(taken.fence > old.fence)
    const aimed = await operator.break(k, { fence: old.fence })
    assert.equal(aimed.broken, false)
    assert.equal(aimed.lease?.owner, taken.owner)
    assert.equal((await operator.inspect(k)).owner, taken.owner)
    const exact = await operator.break(k, { fence: taken.fence })
    assert.deepEqual([exact.broken, exact.lease?.owner, exact.lease?.fence], [true, taken.owner, taken.fence])
    assert.equal((await operator.inspect(k)).held, false)
    const after = await second.acquire(k)
    assert.ok(after.fence > taken.fence, 'the fence keeps growing after a break')
    await after.release()
  })

  it('lists a key with a brace by its name', async () => {
    const k = `brace-${run}-{x}`
    const lock = await client().acquire(k)
    const found = await listed(client().list(`brace-${run}`))
    assert.deepEqual(
      found.map((l) => l.key),
      [k],
    )
    assert.doesNotMatch(found[0]?.note ?? '', /not recorded/, 'named by its recorded name')
    await lock.release()
  })
})
