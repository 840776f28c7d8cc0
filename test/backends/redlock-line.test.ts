/**
 * Redlock's waiting line (src/engines/quorum-line.ts) on real nodes: contending clients take turns instead
 * of splitting the votes, also with 2 of 5 nodes down (where, before the line, one client kept the lock and
 * another starved until its timeout); and a waiter in line costs about one attempt a second.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { lineKeys } from '../../src/backends/redlock/layout.js'
import { createLockClient, type LockClient, LockNotAcquiredError } from '../../src/index.js'
import { type RedisNodes, startRedisNodes } from '../servers/redis.js'
import { assertSuccessiveHolds, type Hold } from '../support/holds.js'
import { sleep } from '../support/time.js'
import { waitUntil } from '../support/wait.js'

/**
 * `workers` clients of `url` contend for `key` until they have `grants` grants between them (each holds it
 * ~2 ms, then asks again at once, as a busy worker does): the grants each one got. Every acquire may wait
 * 60 s, a liveness limit (in turn, a waiter waits for `workers - 1` grants); one that fails fails the test
 * (a starved waiter). No two holds overlap, and fences increase.
 */
async function contend(url: string, key: string, workers: number, grants: number): Promise<number[]> {
  const clients: LockClient[] = Array.from({ length: workers }, () => createLockClient(url, { ttl: '10s' }))
  const perWorker = Array<number>(workers).fill(0)
  const holds: Hold[] = []
  try {
    await Promise.all(
      clients.map(async (client, i) => {
        while (holds.length < grants) {
          const lock = await client.acquire(key, { timeout: '60s' })
          const start = performance.now()
          perWorker[i]!++
          await sleep(2)
          holds.push({ fence: lock.fence, start, end: performance.now() })
          await lock.release()
        }
      }),
    )
  } finally {
    await Promise.all(clients.map((c) => c.close()))
  }
  assertSuccessiveHolds(holds)
  return perWorker
}

/**
 * Every worker had a fair share: at least a quarter of an even split. Generous on purpose: the line hands
 * the lock round, so each gets about the same; without it one worker took nearly every grant.
 */
function assertEveryoneServed(perWorker: number[], grants: number): void {
  const share = grants / perWorker.length
  for (const [i, got] of perWorker.entries()) {
    assert.ok(got >= share / 4, `worker ${i} got ${got} of ${grants} grants (${perWorker.join(', ')})`)
  }
}

/** `fn` over an admin connection to the server on `port`, closed after it. */
async function withAdmin<T>(port: number, fn: (admin: Redis) => Promise<T>): Promise<T> {
  const admin = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 0 })
  try {
    return await fn(admin)
  } finally {
    admin.disconnect()
  }
}

/** The EVALSHA calls the server on `port` has run so far (INFO commandstats). */
const evalshaCalls = (port: number) =>
  withAdmin(port, async (a) =>
    Number(/cmdstat_evalsha:calls=(\d+)/.exec(await a.info('commandstats'))?.[1] ?? 0),
  )

describe('redlock: the waiting line (5 nodes)', { timeout: 600_000 }, () => {
  let nodes: RedisNodes
  const url = () => nodes.url('?restartDelay=0')

  before(async () => {
    nodes = await startRedisNodes(5)
  })
  after(() => nodes.destroy())

  it('contending clients take turns: each one is granted its share, in turn', async () => {
    const perWorker = await contend(url(), 'turns', 6, 240)
    assertEveryoneServed(perWorker, 240)
  })

  it('with 2 of 5 nodes down, no contending client starves', async () => {
    const down = nodes.servers.slice(3)
    await Promise.all(down.map((s) => s.stop()))
    try {
      // With 2 of 5 down every round needs all 3 others: under load, one reply past the default nodeTimeout
      // (100 ms at this ttl) fails the round for everyone, and 10 s of such rounds fail an acquire as
      // unavailable. Starving is what this test is about, not speed: each node gets 2 s (the 2 down ones
      // still fail at once, connection refused).
      const perWorker = await contend(nodes.url('?restartDelay=0&nodeTimeout=2s'), 'two-down', 4, 160)
      assertEveryoneServed(perWorker, 160)
    } finally {
      for (const s of down) await s.restart()
    }
  })

  it('a waiter in line asks about once a second, not from 10 ms up; the release wakes it at once', async () => {
    const holder = createLockClient(url(), { ttl: '10s' })
    const waiters = Array.from({ length: 3 }, () => createLockClient(url(), { ttl: '10s' }))
    const key = 'idle'
    try {
      const lock = await holder.acquire(key)
      // Once briefly first: the waiters' connections are checked and their channels subscribed (both send
      // scripts of their own), so what is counted below is their waiting alone.
      await Promise.all(waiters.map((w) => w.acquire(key, { timeout: '200ms' }).catch(() => undefined)))
      const port = nodes.servers[0]!.port
      const before = await evalshaCalls(port)
      const granted: number[] = []
      const waiting = waiters.map((w, i) =>
        w.acquire(key, { timeout: '30s' }).then(async (l) => {
          granted.push(i)
          await l.release()
        }),
      )
      // A failed assertion below closes the clients: their acquires then end with that, not unhandled.
      for (const w of waiting) w.catch(() => {})
      await sleep(3000)
      // Each waiter: its first attempt, the re-check once it listens, then at most one attempt per 0.5-1 s
      // (the core's slow poll, which also keeps its place in line alive). Polling from 10 ms up, doubling,
      // as a waiter not in line does, would be about 10 more each in these 3 s.
      const asked = (await evalshaCalls(port)) - before
      assert.ok(asked <= 3 * (2 + 6), `the waiters sent ${asked} attempts to one node in 3 s`)
      assert.deepEqual(granted, [], 'granted while the lock was held')
      await lock.release()
      await Promise.all(waiting)
      assert.equal(granted.length, 3)
    } finally {
      await Promise.all([holder, ...waiters].map((c) => c.close()))
    }
  })

  it('a waiter that gives up leaves the line on every node', async () => {
    const holder = createLockClient(url(), { ttl: '10s' })
    const quitter = createLockClient(url(), { ttl: '10s' })
    const key = 'gives-up'
    try {
      const lock = await holder.acquire(key)
      await assert.rejects(quitter.acquire(key, { timeout: '300ms' }), LockNotAcquiredError)
      const inLine = () =>
        Promise.all(nodes.servers.map((s) => withAdmin(s.port, (a) => a.zcard(lineKeys(key).line))))
      await waitUntil(async () => (await inLine()).every((n) => n === 0), 'the line empty on every node')
      await lock.release()
    } finally {
      await Promise.all([holder, quitter].map((c) => c.close()))
    }
  })
})
