import assert from 'node:assert/strict'
import { after, afterEach, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisLockKeys } from '../../src/backends/redis/layout.js'
import { ACQUIRE } from '../../src/backends/redis/scripts.js'
import { redlockBackend } from '../../src/backends/redlock/index.js'
import { admissionMarker, freshMarker, nodeCounter } from '../../src/backends/redlock/layout.js'
import {
  BackendUnavailableError,
  createLockClient,
  type LockClient,
  LockNotAcquiredError,
  QuorumError,
} from '../../src/index.js'
import { type RedisNodes, type RedisServer, startRedisNodes } from '../servers/redis.js'
import { assertSuccessiveHolds, type Hold } from '../support/holds.js'
import { awaitLater } from '../support/later.js'
import { startProxy, type Proxy as TcpProxy } from '../support/proxy.js'
import { sleep } from '../support/time.js'
import { waitUntil } from '../support/wait.js'

const NODE_BITS = 8n

/** Clients made in a test, closed after it. */
function clientsOf() {
  const open: LockClient[] = []
  return {
    make(url: string, options: Parameters<typeof createLockClient>[1] = {}) {
      const client = createLockClient(url, options)
      open.push(client)
      return client
    },
    close: () => Promise.all(open.splice(0).map((c) => c.close())),
  }
}

/**
 * The nodes of one describe block: `count` servers started before its tests (each behind a proxy when
 * `proxied`, so a test can slow one down or cut it off) and stopped after them, with the clients its tests
 * made closed first.
 */
function nodeSet(count: number, { proxied = false } = {}) {
  const set = {
    nodes: undefined as unknown as RedisNodes,
    proxies: [] as TcpProxy[],
    clients: clientsOf(),
    /** When the servers were started (monotonic ms). */
    startedAt: 0,
    /** The URL through the proxies. */
    proxiedUrl: (query: string) =>
      `redlock://${set.proxies.map((p) => `127.0.0.1:${p.port}`).join(',')}${query}`,
  }
  before(async () => {
    set.startedAt = performance.now()
    set.nodes = await startRedisNodes(count)
    if (proxied) set.proxies = await Promise.all(set.nodes.servers.map((s) => startProxy(s.port)))
  })
  after(async () => {
    await set.clients.close()
    await Promise.all(set.proxies.map((p) => p.close()))
    for (const s of set.nodes.servers) s.signal('SIGCONT')
    await set.nodes.destroy()
  })
  return set
}

/** Admin connections to the servers on `ports`, for `fn`; closed after it. */
async function withAdmins<T>(ports: readonly number[], fn: (admins: Redis[]) => Promise<T>): Promise<T> {
  const admins = ports.map((port) => {
    const admin = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 0 })
    admin.on('error', () => {})
    return admin
  })
  try {
    return await fn(admins)
  } finally {
    for (const a of admins) a.disconnect()
  }
}

const portsOf = (servers: readonly RedisServer[]) => servers.map((s) => s.port)

/** Sets `key`'s fence counter to `value` on the servers on `ports` (as if they had granted it that often). */
const setFence = (ports: readonly number[], key: string, value: string) =>
  withAdmins(ports, (admins) => Promise.all(admins.map((a) => a.set(redisLockKeys(key).fence, value))))

/** The admission marker of a node and its current run_id, read by an admin connection. */
function admissionOf(port: number, prefix?: string): Promise<{ runId: string; marker: string | null }> {
  return withAdmins([port], async ([admin]) => {
    const info = await admin!.info('server')
    return { runId: /run_id:(\w+)/.exec(info)?.[1] ?? '', marker: await admin!.get(admissionMarker(prefix)) }
  })
}

/**
 * Whether the node at `port` is admitted (its marker is its run_id) within `ms`: the connected clients catch
 * a restarted node up by themselves. False when it is not by then (the caller asserts what it needs).
 */
function admittedWithin(port: number, ms: number, prefix?: string): Promise<boolean> {
  const admitted = async () => {
    const { runId, marker } = await admissionOf(port, prefix)
    return runId !== '' && marker === runId
  }
  return waitUntil(admitted, `${port} admitted`, { withinMs: ms }).then(
    () => true,
    () => false,
  )
}

/** The error of an acquire that must be refused (a grant is released, and fails the test with `why`). */
function refusal(client: LockClient, key: string, timeout: string, why: string): Promise<unknown> {
  return client.acquire(key, { timeout }).then(
    async (lock) => {
      await lock.release()
      return assert.fail(`${why}: granted with fence ${lock.fence}`)
    },
    (e: unknown) => e,
  )
}

/** An acquire that must fail with a QuorumError (whose message matches `expected`, when given): that error. */
async function quorumRefusal(
  client: LockClient,
  key: string,
  timeout: string,
  why: string,
  expected?: RegExp,
): Promise<QuorumError> {
  const error = await refusal(client, key, timeout, why)
  assert.ok(error instanceof QuorumError, `expected a QuorumError, got ${error}`)
  if (expected) assert.match(error.message, expected)
  return error
}

/** Waits until `ms` (monotonic) has passed: servers younger than restartDelay would not vote yet. */
const ageUntil = (at: number) => sleep(Math.max(0, at - performance.now()))

/**
 * Six clients of `url` take turns on `key` for 4 s, each holding it a random moment of up to `holdMs`,
 * while `fault` runs in a loop: no two holds overlap, and fences increase.
 */
async function contendUnder(
  clients: ReturnType<typeof clientsOf>,
  url: string,
  key: string,
  { ttl, holdMs }: { ttl: string; holdMs: number },
  fault: () => Promise<void>,
): Promise<void> {
  const holds: Hold[] = []
  let unconfirmed = 0
  const until = performance.now() + 4000
  let running = true
  const faults = (async () => {
    while (running) await fault()
  })()
  try {
    await Promise.all(
      Array.from({ length: 6 }, async () => {
        const client = clients.make(url, { ttl })
        while (performance.now() < until) {
          const lock = await client.acquire(key, { timeout: '10s' })
          const start = performance.now()
          await sleep(Math.random() * holdMs)
          holds.push({ fence: lock.fence, start, end: performance.now() })
          // A release no majority confirmed within the node timeout is a legitimate outcome under these
          // faults (on a loaded machine a stalled event loop alone can cause it): the lease then ends by
          // its ttl, and what this test checks (no overlap, rising fences) holds either way.
          await lock.release().catch((error: unknown) => {
            if (!(error instanceof BackendUnavailableError)) throw error
            unconfirmed++
          })
        }
      }),
    )
  } finally {
    running = false
    await faults
  }
  assert.ok(holds.length >= 5, `only ${holds.length} grants in 4 s (${unconfirmed} releases unconfirmed)`)
  assertSuccessiveHolds(holds)
}

describe('redlock: nodes down, slow and paused (5 nodes)', { timeout: 120_000 }, () => {
  const set = nodeSet(5, { proxied: true })
  /** Through a proxy per node, so a test can slow one down. */
  const proxied = (query: string) => set.proxiedUrl(`?restartDelay=0${query}`)
  const resetProxies = () => {
    for (const p of set.proxies) p.delayMs = 0
  }
  /** `contendUnder` through the proxies, which `fault` slows down (reset after). */
  const contendSlowed = (key: string, fault: () => Promise<void>) =>
    contendUnder(set.clients, proxied('&nodeTimeout=80ms'), key, { ttl: '10s', holdMs: 2 }, fault).finally(
      resetProxies,
    )

  it('acquires and releases with 1 and with 2 of 5 nodes stopped; with 3 down it names them in a QuorumError', async () => {
    const { servers } = set.nodes
    const client = set.clients.make(set.nodes.url('?restartDelay=0'), { ttl: '5s' })
    const key = 'down'
    let last = -1n
    const cycle = async () => {
      const lock = await client.acquire(key, { timeout: '5s' })
      assert.ok(lock.fence > last, `fence ${lock.fence} after ${last}`)
      last = lock.fence
      await lock.release()
    }
    await cycle()
    try {
      await servers[0]!.stop()
      await cycle()
      await servers[1]!.stop()
      await cycle()
      // Paused, not stopped: three of five restarted empty at once would be a majority that lost its
      // memory, which no node can recover from on its own (it stays unavailable: see admission.ts).
      servers[2]!.signal('SIGSTOP')
      const error = await quorumRefusal(
        client,
        key,
        '1s',
        'acquired with 3 of 5 nodes down',
        /3 of 5 Redlock nodes failed/,
      )
      const named = error.failures.map((f) => f.node).join(' ')
      for (const s of servers.slice(0, 3)) assert.match(named, new RegExp(`:${s.port}\\b`))
      for (const s of servers.slice(3)) assert.doesNotMatch(named, new RegExp(`:${s.port}\\b`))
    } finally {
      servers[2]!.signal('SIGCONT')
      for (const s of servers.slice(0, 2)) await s.restart()
    }
    // Back to a full set: the same client recovers (its connections come back by themselves, and the two
    // nodes restarted empty catch up their counters from the three others).
    await cycle()
    for (const s of servers.slice(0, 2)) {
      assert.ok(await admittedWithin(s.port, 10_000), `${s.port} was not caught up after its restart`)
    }
  })

  it('a slow node does not stall an acquire beyond its per-node timeout', async () => {
    const client = set.clients.make(proxied('&nodeTimeout=100ms'), { ttl: '10s' })
    set.proxies[3]!.delayMs = 3000
    set.proxies[4]!.delayMs = 3000
    try {
      const started = performance.now()
      const lock = await client.acquire('slow')
      const took = performance.now() - started
      // Generous: far below the slow nodes' 3 s, so the majority of fast nodes decided alone.
      assert.ok(took < 1500, `acquire took ${Math.round(took)} ms with two nodes 3 s slow`)
      await lock.release()
      // Three slow nodes leave no majority: each one counts as failed after its 100 ms.
      set.proxies[2]!.delayMs = 3000
      await quorumRefusal(
        client,
        'slow-3',
        '300ms',
        'acquired, 3 of 5 nodes 3 s slow',
        /no reply within 100 ms/,
      )
    } finally {
      resetProxies()
    }
  })

  it('never grants twice while slow nodes answer after the verdicts (late grants, retries of one owner)', async () => {
    // Three nodes answer after random delays that change every few ms, within the node timeout: verdicts
    // are reached before they answer, contenders reach the nodes in different orders (splits), and each
    // retry of an acquire meets the late answers of its previous attempt. A failed attempt's clean-up that
    // landed after the next attempt was granted would delete a hold that attempt counts on.
    await contendSlowed('late-answers', async () => {
      for (const i of [2, 3, 4]) set.proxies[i]!.delayMs = Math.random() * 30
      await sleep(3)
    })
  })

  it('never grants twice while the nodes keep forgetting their scripts (each is re-sent after NOSCRIPT)', async () => {
    // A script the server does not know is answered NOSCRIPT and sent again with its source, one round
    // trip later: after whatever else the client sent meanwhile on that connection. A failed attempt's
    // clean-up re-sent that way landed after the next attempt of the same acquire had been granted there,
    // and deleted the hold it counted on (the conformance suite saw two holders on fresh servers).
    await withAdmins(portsOf(set.nodes.servers), (admins) =>
      contendSlowed('noscript', async () => {
        // Within the node timeout even with the NOSCRIPT round trip added (2 x 2 x 12 < 80 ms).
        for (const i of [2, 3, 4]) set.proxies[i]!.delayMs = Math.random() * 12
        await Promise.all(admins.map((a) => a.script('FLUSH')))
        await sleep(2)
      }),
    )
  })

  it("the clean-up of a failed attempt, re-sent after NOSCRIPT, never undoes the next attempt's grant", async () => {
    // Deterministic: nodes 3 and 4 are slow (30 ms each way) and know ACQUIRE but not RELEASE. Attempt 1
    // is refused by 0-2 (another owner holds them) and granted on 3 and 4; its clean-up is answered
    // NOSCRIPT and re-sent a round trip later. Attempt 2 of the same acquire starts at once, with node 0
    // freed meanwhile: it reaches 3 and 4 before the re-sent clean-up does. Had it counted them (same owner
    // id: "already ours"), the clean-up would then delete them, and the grant would rest on node 0 alone.
    const mine = set.proxies.map(
      (p) => new Redis(p.port, '127.0.0.1', { autoResendUnfulfilledCommands: false }),
    )
    const backend = redlockBackend({ clients: mine, nodeTimeoutMs: 200, restartDelayMs: 0 })
    const key = 'resent-clean-up'
    const lockKey = redisLockKeys(key).lock
    try {
      await withAdmins(portsOf(set.nodes.servers), async (admins) => {
        await backend.inspect(key, AbortSignal.timeout(5000)) // every connection checked (scripts loaded)
        await Promise.all(admins.slice(0, 3).map((a) => a.set(lockKey, 'someone-else', 'PX', 10_000)))
        for (const a of admins.slice(3)) {
          await a.script('FLUSH')
          await a.script('LOAD', ACQUIRE.source)
        }
        set.proxies[3]!.delayMs = 30
        set.proxies[4]!.delayMs = 30
        const req = { key, owner: 'a'.repeat(32), ttlMs: 10_000 }
        const first = await backend.tryAcquire(req, AbortSignal.timeout(5000))
        assert.equal(first.granted, false)
        await admins[0]!.del(lockKey)
        const second = await backend.tryAcquire(req, AbortSignal.timeout(5000))
        await sleep(300) // the re-sent clean-up has landed
        const holders = await Promise.all(admins.map((a) => a.get(lockKey)))
        const ours = holders.filter((h) => h?.startsWith(req.owner)).length
        if (second.granted) assert.ok(ours >= 3, `granted, but held on ${ours} of 5 nodes: ${holders}`)
      })
    } finally {
      resetProxies()
      await backend.close()
      for (const c of mine) c.disconnect()
    }
  })

  it('fences strictly increase across successive holders while nodes pause and resume', async () => {
    const { servers } = set.nodes
    const key = 'chaos'
    let outOfStep = 0
    await withAdmins(portsOf(servers), async (admins) => {
      try {
        // One or two random nodes at a time stop answering (SIGSTOP) for a while, keeping their data: the
        // majorities that grant the lock keep changing, and the nodes' fence counters fall out of step.
        const url = set.nodes.url('?restartDelay=0&nodeTimeout=50ms')
        await contendUnder(set.clients, url, key, { ttl: '5s', holdMs: 3 }, async () => {
          const pick = [0, 1, 2, 3, 4]
            .sort(() => Math.random() - 0.5)
            .slice(0, 1 + Math.floor(Math.random() * 2))
          for (const i of pick) servers[i]!.signal('SIGSTOP')
          await sleep(100 + Math.random() * 200)
          for (const i of pick) servers[i]!.signal('SIGCONT')
          const counters = await Promise.all(admins.map((a) => a.get(nodeCounter())))
          if (new Set(counters).size > 1) outOfStep++
          await sleep(Math.random() * 100)
        })
      } finally {
        for (const s of servers) s.signal('SIGCONT')
      }
    })
    // The scenario did what it claims: the nodes' counters were seen out of step (the paused ones missed
    // grants), so tokens had to be written back for the order above to hold.
    assert.ok(outOfStep > 0, 'the fence counters never fell out of step: the chaos did not bite')
  })
})

describe('redlock: fence write-back (3 nodes)', { timeout: 60_000 }, () => {
  const set = nodeSet(3, { proxied: true })

  it('writes the token back to the majority, so the next majority (without the minting node) mints a larger one', async () => {
    const key = 'write-back'
    const client = set.clients.make(set.proxiedUrl('?restartDelay=0&nodeTimeout=2s'), { ttl: '10s' })
    // The fresh set is admitted by its first use (a set with counters but no admitted node is not fresh).
    await (await client.acquire('bootstrap')).release()
    // Node 0 is far ahead (it granted this key often while the others were away).
    await setFence([set.nodes.servers[0]!.port], key, '100')
    // Node 2 answers late, so the deciding majority is {0, 1}: node 0 mints 101, node 1 returns 1.
    set.proxies[2]!.delayMs = 300
    const first = await client.acquire(key)
    assert.equal(first.fence >> NODE_BITS, 101n)
    assert.equal(first.fence & 0xffn, 0n, 'the token carries the index of the node that minted it')
    await first.release()
    set.proxies[2]!.delayMs = 0
    // Now node 0 is gone: the next majority is {1, 2}. Node 1 had 101 written back, so it mints 102.
    await set.nodes.servers[0]!.stop()
    try {
      const second = await client.acquire(key, { timeout: '5s' })
      assert.ok(second.fence > first.fence, `fence ${second.fence} after ${first.fence}`)
      await second.release()
    } finally {
      await set.nodes.servers[0]!.restart()
    }
  })

  it("shows the holder's own token when a node ahead of it granted the hold late", async () => {
    const key = 'late-node'
    const url = set.proxiedUrl('?restartDelay=0&nodeTimeout=2s')
    const [holder, other] = [set.clients.make(url, { ttl: '20s' }), set.clients.make(url)]
    // Every node votes for this client (node 0 may still be catching up after the test before).
    await waitUntil(
      async () => {
        const warm = await holder.acquire('warm', { timeout: '10s' })
        const seen = await holder.inspect('warm')
        await warm.release()
        return seen.note === undefined
      },
      'a grant held on all 3 nodes',
      { withinMs: 30_000 },
    )
    // Node 2 is ahead (a waiter's attempt was granted there alone and taken back), and slow: the holder's
    // grant is decided by {0, 1}, and its part on node 2 lands afterwards, minting more than the token.
    await setFence([set.nodes.servers[2]!.port], key, '1000000')
    set.proxies[2]!.delayMs = 500
    try {
      const lock = await holder.acquire(key)
      assert.ok(lock.fence >> NODE_BITS < 1_000_000n, `decided by nodes 0 and 1: ${lock.fence}`)
      await withAdmins([set.nodes.servers[2]!.port], ([admin]) =>
        waitUntil(
          async () => (await admin!.get(redisLockKeys(key).lock)) !== null,
          'the late hold on node 2',
        ),
      )
      set.proxies[2]!.delayMs = 0
      const seen = await other.inspect(key)
      assert.deepEqual([seen.owner, seen.fence! >> NODE_BITS], [lock.owner, lock.fence >> NODE_BITS])
      const listed: bigint[] = []
      for await (const found of other.list(key)) listed.push(found.fence! >> NODE_BITS)
      assert.deepEqual(listed, [lock.fence >> NODE_BITS])
      const broken = await other.break(key, { fence: lock.fence })
      assert.equal(broken.broken, true, "a break aimed at the holder's fence ends its hold")
    } finally {
      set.proxies[2]!.delayMs = 0
    }
  })
})

describe('redlock: delayed restart (3 nodes)', { timeout: 60_000 }, () => {
  const TTL_MS = 4000
  const set = nodeSet(3, { proxied: true })

  before(async () => {
    // The fresh set is admitted at its first use: its young servers vote at once, having forgotten nothing.
    // A restarted one must not (the rule under test).
    const fresh = set.clients.make(set.nodes.url('?restartDelay=0'), { ttl: TTL_MS })
    await (await fresh.acquire('bootstrap')).release()
  })

  it('a node restarted empty does not count toward a quorum until the largest ttl has passed', async () => {
    const key = 'restart'
    const url = set.proxiedUrl('?nodeTimeout=100ms')
    const first = set.clients.make(url, { ttl: TTL_MS, renew: false })
    // The first holder's majority is {A, C}: B is cut off while it acquires.
    set.proxies[1]!.mode = 'blackhole'
    const lock = await first.acquire(key, { timeout: '5s' })
    // B's part of that attempt must have timed out (100 ms) before B is reachable again, or it would still
    // be granted there as a late vote.
    await sleep(300)
    set.proxies[1]!.mode = 'pass'
    set.proxies[1]!.cut()
    // C restarts without persistence: it has forgotten the lock. Only A still holds it.
    await set.nodes.servers[2]!.restart()
    const restartedAt = performance.now()

    // Without the delayed restart, B and C would form a fresh majority: a second holder while the first
    // is still valid. This control shows the test's setup really is that hazard.
    const reckless = set.clients.make(url.replace('?', '?restartDelay=0&'), { ttl: TTL_MS, renew: false })
    const double = await reckless.acquire(key, { timeout: '2s' })
    assert.ok(lock.validUntil > performance.now(), 'the first lock should still be valid for the control')
    await double.release()

    // With the default (restartDelay = the largest ttl in use), C is left out: no majority for a newcomer.
    const second = set.clients.make(url, { ttl: TTL_MS, renew: false })
    const refused = await refusal(second, key, '1s', 'granted while C was in quarantine')
    assert.ok(
      refused instanceof LockNotAcquiredError || refused instanceof QuorumError,
      `expected the acquire to fail, got ${refused}`,
    )
    assert.ok(performance.now() < restartedAt + TTL_MS, 'the refusal must come while C is in quarantine')
    // Once C has been up for the ttl (and the first lease has run out), the lock is available again.
    const later = await second.acquire(key, { timeout: '15s' })
    assert.ok(performance.now() >= restartedAt + TTL_MS - 1000, 'granted before C had been up for the ttl')
    assert.ok(later.fence > lock.fence)
    await later.release()
  })
})

describe(
  'redlock: nodes restarted empty one at a time keep the fences increasing (3 nodes)',
  { timeout: 120_000 },
  () => {
    const RESTART_DELAY_MS = 800
    const set = nodeSet(3)

    it('C restarts empty, then B, then A goes down: the next fence is above every earlier one (issue 11)', async () => {
      // The issue's sequence. At no moment are two nodes unable to vote, yet before the fix the write-back
      // only raised the nodes of each granting majority, and each restarted node forgot its counter: B and C
      // ended up both empty, and their majority minted M = 1 again (token 257).
      const url = set.nodes.url(`?restartDelay=${RESTART_DELAY_MS}ms&nodeTimeout=100ms`)
      const client = set.clients.make(url, { ttl: '2s' })
      const [A, B, C] = set.nodes.servers as [RedisServer, RedisServer, RedisServer]
      const key = 'restarts'
      let highest = -1n
      const cycle = async (name: string) => {
        const lock = await client.acquire(name, { timeout: '10s' })
        if (name === key) {
          assert.ok(lock.fence > highest, `fence ${lock.fence} after ${highest}`)
          highest = lock.fence
        }
        await lock.release()
      }
      for (let i = 0; i < 20; i++) await cycle(key)
      assert.ok(highest >> NODE_BITS >= 20n, `M is ${highest >> NODE_BITS} after 20 grants`)

      const restartEmpty = async (server: RedisServer) => {
        await server.restart()
        const restartedAt = performance.now()
        // Other locks go on meanwhile (the other two nodes vote).
        await cycle('other')
        await ageUntil(restartedAt + RESTART_DELAY_MS)
        // Liveness, with a generous bound: the connected client catches the node up by itself.
        return admittedWithin(server.port, 10_000)
      }
      const caughtUpC = await restartEmpty(C)
      const caughtUpB = await restartEmpty(B)
      await A.stop()
      try {
        const lock = await client.acquire(key, { timeout: '10s' })
        await lock.release()
        assert.ok(
          lock.fence > highest,
          `fence ${lock.fence} (M = ${lock.fence >> NODE_BITS}) after ${highest}`,
        )
      } finally {
        await A.restart()
      }
      assert.ok(caughtUpC, 'C was not admitted again within 10 s of its restart')
      assert.ok(caughtUpB, 'B was not admitted again within 10 s of its restart')
    })

    it('catches up the counters under any prefix (glob characters in it match only themselves)', async () => {
      const prefix = 'we*ird[1]?:'
      const url = set.nodes.url(`?prefix=${encodeURIComponent(prefix)}&restartDelay=0&nodeTimeout=100ms`)
      const client = set.clients.make(url, { ttl: '2s' })
      const key = 'k*[x]?'
      for (let i = 0; i < 5; i++) await (await client.acquire(key, { timeout: '10s' })).release()
      // A name's own counter, as earlier versions kept one, under the prefix, and one under a prefix the
      // unescaped glob would match: only the first is copied.
      const [A, B, C] = set.nodes.servers as [RedisServer, RedisServer, RedisServer]
      await withAdmins(portsOf([A, B]), (admins) =>
        Promise.all(
          admins.flatMap((a) => [
            a.set(redisLockKeys('old', prefix).fence, '50'),
            a.set(redisLockKeys('old', 'weXird1Y:').fence, '999'),
          ]),
        ),
      )
      await C.restart()
      assert.ok(await admittedWithin(C.port, 10_000, prefix), 'C was not caught up under the prefix')
      const counter = await withAdmins([C.port], ([admin]) => admin!.get(nodeCounter(prefix)))
      assert.equal(counter, '50')
    })
  },
)

describe(
  'redlock: a restarted node votes only once caught up, whoever connects (3 nodes)',
  { timeout: 120_000 },
  () => {
    const set = nodeSet(3)

    it('a client that connects only after C restarted empty does not let C vote before it caught up', async () => {
      // Per-client tracking of run_ids would miss this: the second client never saw C's old run_id, so C
      // looks like any node to it. The admission marker lives on the node itself.
      const url = set.nodes.url('?restartDelay=300ms&nodeTimeout=100ms')
      const [A, , C] = set.nodes.servers as [RedisServer, RedisServer, RedisServer]
      const key = 'late-client'
      const first = set.clients.make(url, { ttl: '2s' })
      for (let i = 0; i < 5; i++) await (await first.acquire(key, { timeout: '10s' })).release()
      await set.clients.close()
      // A grant with M = 50 was written back to {A, C}; B missed it (as if paused meanwhile).
      await setFence(portsOf([A, C]), key, '50')
      const highest = 50n << NODE_BITS
      // C restarts empty while no client is connected; then A stops answering (paused, data kept).
      await C.restart()
      A.signal('SIGSTOP')
      try {
        await sleep(600) // C is older than restartDelay: only its admission keeps it from voting
        const late = set.clients.make(url, { ttl: '2s' })
        const refused = await quorumRefusal(
          late,
          key,
          '1500ms',
          `B and C voting, C not caught up (<= ${highest})`,
        )
        const onC = refused.failures.find((f) => f.node.endsWith(`:${C.port}`))
        assert.ok(onC, `C is not among the failures: ${refused.message}`)
        assert.match(String((onC.error as Error).message), /not caught up|catching up/)
        const ofC = await admissionOf(C.port)
        assert.notEqual(ofC.marker, ofC.runId, 'C must not be admitted without A')
        // A answers again: C catches up from A and B, and the next grant is above 50.
        A.signal('SIGCONT')
        const lock = await late.acquire(key, { timeout: '10s' })
        await lock.release()
        assert.ok(lock.fence > highest, `fence ${lock.fence} after ${highest}`)
        assert.ok(await admittedWithin(C.port, 5000), 'C was not admitted after A came back')
      } finally {
        A.signal('SIGCONT')
      }
    })
  },
)

describe('redlock: bootstrap of a fresh set (3 nodes)', { timeout: 60_000 }, () => {
  const clients = clientsOf()
  let nodes: RedisNodes | undefined
  afterEach(async () => {
    await clients.close()
    for (const s of nodes?.servers ?? []) s.signal('SIGCONT')
    await nodes?.destroy()
    nodes = undefined
  })
  /** Fresh nodes for one test, and a client of them. */
  const fresh = async () => {
    nodes = await startRedisNodes(3)
    const client = clients.make(nodes.url('?restartDelay=0&nodeTimeout=100ms'), { ttl: '2s' })
    return { servers: nodes.servers as [RedisServer, RedisServer, RedisServer], client }
  }
  /** The node at `port` is admitted as part of a fresh set: its marker and its fresh marker name it. */
  const admittedFresh = async (port: number) => {
    const { runId, marker } = await admissionOf(port)
    const freshOne = await withAdmins([port], ([admin]) => admin!.get(freshMarker()))
    return runId !== '' && marker === runId && freshOne === runId
  }

  it('grants at once on a fresh set whose servers are younger than restartDelay', async () => {
    nodes = await startRedisNodes(3)
    // restartDelay is not set: it is the ttl, 30 s, and the servers are a few seconds old. A fresh set has
    // no lock to forget, so its nodes vote at once (the timeout is well below the 30 s).
    const client = clients.make(nodes.url(), { ttl: '30s' })
    const lock = await client.acquire('fresh', { timeout: '20s' })
    await lock.release()
    for (const s of nodes.servers) assert.ok(await admittedFresh(s.port), `${s.port} not admitted as fresh`)
  })

  it('grants at once with one node down from the start; that node joins once up for restartDelay', async () => {
    const DELAY_MS = 6000
    nodes = await startRedisNodes(3)
    const [A, B, C] = nodes.servers as [RedisServer, RedisServer, RedisServer]
    await C.stop()
    const url = nodes.url(`?restartDelay=${DELAY_MS}ms&nodeTimeout=100ms`)
    const client = clients.make(url, { ttl: '2s' })
    const key = 'late-node'
    let highest = -1n
    const cycle = async () => {
      const lock = await client.acquire(key, { timeout: '20s' })
      assert.ok(lock.fence > highest, `fence ${lock.fence} after ${highest}`)
      highest = lock.fence
      await lock.release()
    }
    // A and B hold no trace of any lock, nor does anything else that answers: the majority {A, B} grants.
    for (let i = 0; i < 5; i++) await cycle()
    for (const s of [A, B]) assert.ok(await admittedFresh(s.port), `${s.port} not admitted as fresh`)
    // C comes up empty. The set is in use: C is a node to catch up (it may have been a voter that lost its
    // memory), with a trace of that at once, and admitted only once it has been up for restartDelay.
    await C.restart()
    const startedC = performance.now()
    await cycle()
    // (Slack for C's start before `restart` returned, which a loaded machine can make seconds.)
    const early = await admissionOf(C.port)
    if (performance.now() < startedC + DELAY_MS - 3000) {
      assert.notEqual(early.marker, early.runId, 'C admitted before it had been up for restartDelay')
    }
    assert.ok(await admittedWithin(C.port, 30_000), 'C was not caught up')
    assert.ok(performance.now() >= startedC + DELAY_MS - 3000, 'C caught up before restartDelay')
    assert.equal(await withAdmins([C.port], ([admin]) => admin!.get(freshMarker())), null)
    assert.equal(await withAdmins([C.port], ([admin]) => admin!.get(nodeCounter())), '6')
    // C now votes with the fences it copied: {B, C} mints above every earlier grant.
    await A.stop()
    try {
      await cycle()
    } finally {
      await A.restart()
    }
  })

  it('never takes a set in use for a fresh one: A remembers, B restarted empty, C was never seen', async () => {
    nodes = await startRedisNodes(3)
    const [A, B, C] = nodes.servers as [RedisServer, RedisServer, RedisServer]
    await C.stop()
    // The holder's clients never reconnect to B or C (so no trace is written on them by its catch-ups).
    const options = { autoResendUnfulfilledCommands: false, enableOfflineQueue: false } as const
    const own = [A, B, C].map((s, i) => {
      const c = new Redis(s.port, '127.0.0.1', i === 0 ? options : { ...options, retryStrategy: () => null })
      c.on('error', () => {})
      return c
    })
    const holder = createLockClient(redlockBackend({ clients: own, nodeTimeoutMs: 100 }), {
      ttl: '20s',
      renew: false,
    })
    try {
      const lock = await holder.acquire('k', { timeout: '10s' })
      // B restarts empty (it forgot the lock and its fence), and C comes up for the first time.
      await B.restart()
      await C.restart()
      const newcomer = clients.make(nodes.url('?nodeTimeout=100ms'), { ttl: '20s' })
      const refused = await refusal(
        newcomer,
        'k',
        '3s',
        'granted while the first holder still holds the lock',
      )
      assert.ok(
        refused instanceof QuorumError || refused instanceof LockNotAcquiredError,
        `expected the acquire to fail, got ${refused}`,
      )
      assert.ok(lock.validUntil > performance.now(), 'the first lock should still be valid')
      for (const s of [B, C]) {
        const { runId, marker } = await admissionOf(s.port)
        assert.notEqual(marker, runId, `${s.port} was admitted`)
        assert.equal(await withAdmins([s.port], ([admin]) => admin!.get(freshMarker())), null)
      }
    } finally {
      await holder.close()
      for (const c of own) c.disconnect()
    }
  })

  it('a client that saw the set in use keeps the delayed restart after every node restarted empty', async () => {
    const DELAY_MS = 8000
    nodes = await startRedisNodes(3)
    const client = clients.make(nodes.url(`?restartDelay=${DELAY_MS}ms&nodeTimeout=100ms`), { ttl: '2s' })
    await (await client.acquire('k', { timeout: '10s' })).release()
    // Every node forgets everything at once (all down, then all up: one restarted while the others still
    // remember would get an in-use marker, and the set would wait for an operator). To a newcomer the set
    // looks fresh, but this client knows better (a lock it granted could still be held): its nodes vote
    // only once up for restartDelay, fresh or not.
    for (const s of nodes.servers) await s.stop()
    for (const s of nodes.servers) await s.restart()
    const restartedAt = performance.now()
    const refused = await refusal(client, 'k', '2s', 'granted by nodes restarted empty before restartDelay')
    // Short, and it says when the nodes will vote.
    const text = String((refused as Error).message)
    assert.ok(text.length <= 300, `${text.length} characters: ${text}`)
    if (refused instanceof QuorumError) assert.match(text, /votes in ~\d+ s \(restartDelay 8 s\)|no reply/)
    if (performance.now() < restartedAt + DELAY_MS - 2000) {
      for (const s of nodes.servers) {
        assert.equal(await withAdmins([s.port], ([admin]) => admin!.get(freshMarker())), null)
      }
    }
    // (The core gives up on a store unavailable for max(ttl, 5 s): ask again until the nodes vote.)
    let lock: Awaited<ReturnType<LockClient['acquire']>> | undefined
    for (let i = 0; !lock; i++) {
      lock = await client.acquire('k', { timeout: '5s' }).catch((error: unknown) => {
        if (!(error instanceof BackendUnavailableError) || i >= 8) throw error
        return undefined
      })
    }
    await lock.release()
    assert.ok(performance.now() >= restartedAt + DELAY_MS - 3000, 'granted before restartDelay')
  })

  it('says in a short error which nodes a fresh set waits for', async () => {
    const { servers, client } = await fresh()
    const [, B, C] = servers
    await B.stop()
    await C.stop()
    const error = await quorumRefusal(client, 'fresh', '3s', 'granted by 1 of 3 nodes')
    assert.ok(error.message.length <= 260, `${error.message.length} characters: ${error.message}`)
    for (const s of [B, C]) assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${s.port}\\b`))
    assert.match(error.message, /unreachable|no reply/)
  })

  it('does not take a set with fence counters but no admitted node for a fresh one', async () => {
    const { servers, client } = await fresh()
    // A counter left by earlier use (e.g. every node restarted from its files, or an older fencelock).
    await setFence([servers[1].port], 'earlier', '7')
    const why = 'granted on a set that is not fresh, with no node admitted'
    const counter = redisLockKeys('earlier').fence.replace(/[{}]/g, '\\$&')
    const expected = new RegExp(`holds fence counters \\(${counter}\\): this is not a fresh set`)
    await quorumRefusal(client, 'k', '3500ms', why, expected)
    for (const s of servers) assert.equal((await admissionOf(s.port)).marker, null)
    // The way out docs/backends/redlock.md gives, for an operator who knows the nodes kept every write: admit them by hand.
    for (const s of servers) {
      const { runId } = await admissionOf(s.port)
      await withAdmins([s.port], ([admin]) => admin!.set(admissionMarker(), runId))
    }
    const lock = await client.acquire('k', { timeout: '10s' })
    await lock.release()
  })
})

describe(
  'redlock: a voter restarted while its grant is still under way (3 nodes)',
  { timeout: 120_000 },
  () => {
    const DELAY_MS = 5000
    const set = nodeSet(3)
    let slowC: TcpProxy

    before(async () => {
      slowC = await startProxy(set.nodes.servers[2]!.port)
      // Servers younger than restartDelay would not vote: let them age.
      await ageUntil(set.startedAt + DELAY_MS + 1500)
    })
    after(async () => {
      await slowC.close()
    })

    it('catches the restarted voter up only once that grant has ended, so the next fence is above it', async () => {
      // B votes for a grant and restarts empty before the grant counts (C's vote is late). Caught up at
      // once from A and C, B would miss the grant's M (neither had it yet), and {A, B} would mint it again.
      // A catch-up waits until B has been up for restartDelay (at least the largest ttl): the grant, valid
      // for less than a ttl after its start, has counted or been dropped by then, and C shows its M.
      const [A, B, C] = set.nodes.servers as [RedisServer, RedisServer, RedisServer]
      const key = 'in-flight'
      const { lock: lockKey, fence: fenceKey } = redisLockKeys(key)
      // The set admitted by its first use; then every counter at 10 (in step: a node that missed a grant
      // meanwhile would shift the values this test expects).
      const setup = createLockClient(set.nodes.url('?restartDelay=0'), { ttl: '2s' })
      try {
        await (await setup.acquire(key, { timeout: '10s' })).release()
      } finally {
        await setup.close()
      }
      await setFence(portsOf([A, B, C]), key, '10')
      // The first client reaches C through a proxy that holds its requests for 3 s, and never reconnects to
      // B (so only the second client catches B up after its restart).
      const options = { autoResendUnfulfilledCommands: false, enableOfflineQueue: false } as const
      const own = [
        new Redis(A.port, '127.0.0.1', options),
        new Redis(B.port, '127.0.0.1', { ...options, retryStrategy: () => null }),
        new Redis(slowC.port, '127.0.0.1', options),
      ]
      for (const c of own) c.on('error', () => {})
      let restartedAt = 0
      try {
        await withAdmins(portsOf([A, B]), async ([adminA, adminB]) => {
          // Connected before B restarts, so it catches B up when B comes back.
          const second = set.clients.make(set.nodes.url(`?restartDelay=${DELAY_MS}ms&nodeTimeout=200ms`), {
            ttl: '4s',
          })
          await second.inspect(key)
          const first = createLockClient(
            redlockBackend({ clients: own, nodeTimeoutMs: 10_000, restartDelayMs: DELAY_MS }),
            { ttl: '4s' },
          )
          try {
            await first.inspect(key) // every connection checked
            // A refuses (someone else holds the key there); C gets the request 3 s late.
            await adminA!.set(lockKey, 'someone-else', 'PX', 30_000)
            slowC.delayMs = 3000
            const granted = awaitLater(first.acquire(key, { timeout: '20s' }))
            for (let i = 0; (await adminB!.get(fenceKey)) !== '11'; i++) {
              assert.ok(i < 500, 'B never voted')
              await sleep(10)
            }
            await B.restart()
            restartedAt = performance.now()
            // C's reply comes back at once (its request is still held until 3 s): the grant stays valid.
            slowC.delayMs = 0
            const lock = await granted
            assert.equal(lock.fence >> NODE_BITS, 11n)
            await lock.release().catch(() => {})
          } finally {
            await first.close()
          }
          await adminA!.del(lockKey)
          assert.ok(await admittedWithin(B.port, 20_000), 'B was not caught up')
          // B old enough to vote at once: a refused attempt would raise A's counter meanwhile (and hide a
          // repeated fence, which this test is about).
          await ageUntil(restartedAt + DELAY_MS + 1500)
          const highest = (11n << NODE_BITS) | 1n
          C.signal('SIGSTOP')
          const next = await second.acquire(key, { timeout: '20s' })
          await next.release()
          assert.ok(next.fence > highest, `fence ${next.fence} after ${highest} (B's and C's grant)`)
        })
      } finally {
        C.signal('SIGCONT')
        slowC.delayMs = 0
        for (const c of own) c.disconnect()
      }
    })
  },
)
