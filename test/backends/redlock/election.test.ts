/**
 * Leader election on Redlock, beside the shared election cases (conformance.test.ts): what each node
 * keeps, a proclaim refused once another candidate leads, terms that never go back across nodes restarted
 * empty, and the majority's view when a node disagrees.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisLockKeys } from '../../../src/backends/redis/mutex/layout.js'
import { admissionMarker, electionKeys, nodeCounter } from '../../../src/backends/redlock/layout.js'
import { createLockClient, type LockClient, LockLostError } from '../../../src/index.js'
import { type RedisNodes, type RedisServer, startRedisNodes } from '../../servers/redis.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'

const NODE_BITS = 8n

/** `count` servers for one describe block, and the clients its tests made (closed first). */
function nodeSet(count: number) {
  const set = {
    nodes: undefined as unknown as RedisNodes,
    open: [] as LockClient[],
    client(query: string, options: Parameters<typeof createLockClient>[1] = {}) {
      const client = createLockClient(set.nodes.url(query), options)
      set.open.push(client)
      return client
    },
  }
  before(async () => {
    set.nodes = await startRedisNodes(count)
  })
  after(async () => {
    await Promise.all(set.open.splice(0).map((c) => c.close()))
    await set.nodes.destroy()
  })
  return set
}

/** Admin connections to `servers`, for `fn`; closed after it. */
async function withAdmins<T>(
  servers: readonly RedisServer[],
  fn: (admins: Redis[]) => Promise<T>,
): Promise<T> {
  const admins = servers.map((s) => {
    const admin = new Redis(s.port, '127.0.0.1', { maxRetriesPerRequest: 0 })
    admin.on('error', () => {})
    return admin
  })
  try {
    return await fn(admins)
  } finally {
    for (const a of admins) a.disconnect()
  }
}

/** Whether the node of `server` is admitted again (its marker names its run_id) within `ms`. */
function admittedWithin(server: RedisServer, ms: number): Promise<boolean> {
  const admitted = () =>
    withAdmins([server], async ([admin]) => {
      const runId = /run_id:(\w+)/.exec(await admin!.info('server'))?.[1]
      return runId !== undefined && (await admin!.get(admissionMarker())) === runId
    }).catch(() => false)
  return waitUntil(admitted, `${server.port} admitted`, { withinMs: ms }).then(
    () => true,
    () => false,
  )
}

describe('redlock election (3 nodes)', { timeout: 120_000 }, () => {
  const set = nodeSet(3)

  it('keeps, on every node, the attempt that leads, its term and value beside it, apart from a lock of the name', async () => {
    const client = set.client('?restartDelay=0', { ttl: '20s' })
    const name = 'layout'
    const lead = await client.election(name).campaign({ value: 'http://10.0.0.7:8080' })
    const k = electionKeys(name)
    const seen = await withAdmins(set.nodes.servers, (admins) =>
      Promise.all(
        admins.map(async (a) => ({
          leader: await a.get(k.leader),
          pttl: await a.pttl(k.leader),
          term: await a.get(k.term),
          termTtl: await a.pttl(k.term),
          value: await a.get(k.value),
          counter: await a.get(nodeCounter()),
          lock: await a.get(redisLockKeys(name).lock),
        })),
      ),
    )
    // A won round stops the acquires not sent yet: a majority holds it, the others may not.
    const holding = seen.filter((node) => node.leader !== null)
    assert.ok(holding.length >= 2, `held on ${holding.length} of 3 nodes`)
    for (const node of holding) {
      // Each attempt writes its own owner id on the nodes: `<owner>.<attempt>`.
      assert.ok(node.leader?.startsWith(`${lead.owner}.`), `leader key ${node.leader}`)
      assert.ok(node.pttl > 0 && node.pttl <= 20_000, `lease ${node.pttl} ms`)
      assert.equal(node.value, `${node.leader} http://10.0.0.7:8080`)
      // The term here expires with the hold; the node's counter stays, and is the term's M.
      assert.ok(node.termTtl > 0, "the hold's term expires with it")
      assert.equal(BigInt(node.term ?? -1), lead.term >> NODE_BITS)
      assert.ok(BigInt(node.counter ?? -1) >= lead.term >> NODE_BITS)
      assert.equal(node.lock, null, 'an election and a lock of the same name are apart')
    }
    await lead.resign()
    const left = await withAdmins(set.nodes.servers, (admins) =>
      Promise.all(admins.map((a) => a.exists(k.leader, k.term, k.value, k.holder, k.line, k.alive))),
    )
    assert.deepEqual(left, [0, 0, 0], 'a resigned election keeps nothing on the nodes but their counters')
  })

  it('refuses a proclaim once another candidate leads, and writes nothing on any node', async () => {
    const [a, b] = [
      set.client('?restartDelay=0', { ttl: '20s' }),
      set.client('?restartDelay=0', { ttl: '20s' }),
    ]
    const name = 'takeover'
    const old = await a.election(name).campaign({ value: 'old' })
    // The old leader's lease ends on every node at once (as after a pause past its lease).
    const k = electionKeys(name)
    await withAdmins(set.nodes.servers, (admins) => Promise.all(admins.map((x) => x.del(k.leader, k.value))))
    const next = await b.election(name).campaign({ value: 'next', timeout: '30s' })
    assert.ok(next.term > old.term, `term ${next.term} after ${old.term}`)
    await assert.rejects(old.proclaim('stale'), LockLostError)
    assert.ok(old.signal.aborted, 'the old leader is told it lost')
    const values = await withAdmins(set.nodes.servers, (admins) =>
      Promise.all(admins.map((x) => x.get(k.value))),
    )
    // A node the won round did not reach holds nothing; none holds the old leader's value.
    for (const value of values) assert.ok(value === null || value.endsWith(' next'), `a node shows ${value}`)
    assert.ok(values.filter((value) => value !== null).length >= 2, `values ${values}`)
    const view = await a.election(name).leader()
    assert.ok(view.leader && view.owner === next.owner && view.value === 'next')
    await next.resign()
  })

  it("shows a vacancy without a term: the nodes' counters move with every lock's grant", async () => {
    const client = set.client('?restartDelay=0', { ttl: '20s' })
    const name = 'vacant'
    await (await client.election(name).campaign({ value: 'v' })).resign()
    const before = await client.election(name).leader()
    await (await client.acquire('some lock')).release()
    const after = await client.election(name).leader()
    assert.deepEqual(before, { leader: false })
    assert.deepEqual(after, before, 'a lock granted meanwhile changes nothing an observer would report')
  })

  it("shows the majority's view when one node disagrees on the value or on who leads", async () => {
    const client = set.client('?restartDelay=0', { ttl: '20s' })
    const name = 'disagree'
    const lead = await client.election(name).campaign({ value: 'v1' })
    const k = electionKeys(name)
    const [first, ...rest] = set.nodes.servers
    // A won round stops the acquires not sent yet: have every node hold it, as a late grant would.
    await withAdmins(set.nodes.servers, async (admins) => {
      const held = await Promise.all(admins.map((a) => a.get(k.leader)))
      const from = admins[held.findIndex((owner) => owner !== null)]!
      const [owner, term, value, pttl] = await Promise.all([
        from.get(k.leader),
        from.get(k.term),
        from.get(k.value),
        from.pttl(k.leader),
      ])
      for (const [i, a] of admins.entries()) {
        if (held[i] !== null) continue
        await a.set(k.leader, owner!, 'PX', pttl)
        await a.set(k.term, term!, 'PX', pttl)
        await a.set(k.value, value!, 'PX', pttl)
      }
    })
    // One node took a value the others did not (a proclaim that reached only it): the majority's stays.
    await withAdmins([first!], async ([admin]) => {
      const onNode = await admin!.get(k.leader)
      await admin!.set(k.value, `${onNode} minority`, 'KEEPTTL')
    })
    let view = await client.election(name).leader()
    assert.ok(view.leader && view.value === 'v1' && view.owner === lead.owner, JSON.stringify(view, String))
    // Another node says someone else leads there: the majority's leader is still shown, with its value.
    await withAdmins([rest[0]!], async ([admin]) => {
      await admin!.set(k.leader, 'someone-else', 'KEEPTTL')
    })
    view = await client.election(name).leader()
    assert.ok(
      view.leader && view.owner === lead.owner && view.term === lead.term,
      JSON.stringify(view, String),
    )
    // Two nodes disagree now: no attempt holds a majority, so nobody leads as far as anyone can tell.
    await withAdmins([first!], (admins) => admins[0]!.set(k.leader, 'a-third', 'KEEPTTL'))
    view = await client.election(name).leader()
    assert.equal(view.leader, false)
    await lead.resign().catch(() => {})
  })
})

describe(
  'redlock election: terms never go back across nodes restarted empty (3 nodes)',
  { timeout: 120_000 },
  () => {
    const RESTART_DELAY_MS = 800
    const set = nodeSet(3)

    it('C restarts empty, then B, then A goes down: the next term is above every earlier one', async () => {
      // Terms come from each node's counter, which admission catches up from the others after a restart:
      // with a counter of their own the two nodes restarted empty would mint from 1 again.
      const client = set.client(`?restartDelay=${RESTART_DELAY_MS}ms&nodeTimeout=100ms`, { ttl: '2s' })
      const [A, B, C] = set.nodes.servers as [RedisServer, RedisServer, RedisServer]
      const name = 'restarts'
      let highest = -1n
      const lead = async () => {
        const leadership = await client.election(name).campaign({ value: 'x', timeout: '10s' })
        assert.ok(leadership.term > highest, `term ${leadership.term} after ${highest}`)
        highest = leadership.term
        await leadership.resign()
      }
      for (let i = 0; i < 20; i++) await lead()
      assert.ok(highest >> NODE_BITS >= 20n, `M is ${highest >> NODE_BITS} after 20 leaderships`)
      const restartEmpty = async (server: RedisServer) => {
        await server.restart()
        await sleep(RESTART_DELAY_MS)
        // Liveness, with a generous bound: the connected client catches the node up by itself.
        return admittedWithin(server, 20_000)
      }
      assert.ok(await restartEmpty(C), 'C was not admitted again within 20 s of its restart')
      assert.ok(await restartEmpty(B), 'B was not admitted again within 20 s of its restart')
      await A.stop()
      try {
        await lead()
      } finally {
        await A.restart()
      }
    })
  },
)
