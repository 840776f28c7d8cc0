import assert from 'node:assert/strict'
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { after, before, describe, it } from 'node:test'
import type { Client } from 'node-zookeeper-client'
import { fourLetterWord } from '../../../src/backends/zookeeper/four-letter.js'
import { zookeeperBackend } from '../../../src/backends/zookeeper/index.js'
import { electionPath, inLine, LATCH_NAME, lockPath } from '../../../src/backends/zookeeper/layout.js'
import type { ElectionFacet, LockBackend } from '../../../src/core/backend.js'
import {
  BackendUnavailableError,
  createLockClient,
  type LeaderView,
  type LockClient,
  LockLostError,
} from '../../../src/index.js'
import { connectAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { type CuratorBuild, compileCurator, javaCommand, LATCH_SOURCE } from '../../support/curator.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil, waitUntil } from '../../support/wait.js'

/**
 * Leader election on ZooKeeper, what the conformance cases cannot see: the nodes on the store (Curator's
 * `LeaderLatch` layout, apart from the locks), a path holding a lock's children refused, proclaim refused
 * once the leader's node is gone, observers woken by ZooKeeper's watches, and Curator 5.4's `LeaderLatch`
 * (a Java child: test/fixtures/curator/CuratorLatch.java) and fencelock candidates in one line, both ways.
 */
const WITHIN = { withinMs: 60_000, everyMs: 50 }
const PREFIX = '/fencelock-election'

describe('zookeeper: leader election', { timeout: 240_000 }, () => {
  let zk: ZooKeeperEnsemble
  let admin: Client
  let build: CuratorBuild
  const open: LockClient[] = []
  const javas: ChildProcessWithoutNullStreams[] = []

  before(async () => {
    zk = await startZooKeeper(1)
    admin = (await connectAdmin(zk.connectString, { sessionTimeout: 10_000 })) as Client
    build = compileCurator(LATCH_SOURCE)
  })
  after(async () => {
    for (const java of javas) if (java.exitCode === null && java.signalCode === null) java.kill('SIGKILL')
    build.cleanup()
    await Promise.all(open.map((c) => c.close()))
    admin.close()
    await zk.destroy()
  })

  const clientOn = (backend: LockBackend | string, ttl = '10s') => {
    const client = createLockClient(backend, { ttl })
    open.push(client)
    return client
  }
  const call = <T>(send: (done: (error: unknown, value: T) => void) => void) =>
    new Promise<T>((resolve, reject) => send((error, value) => (error ? reject(error) : resolve(value))))
  const childrenOf = (path: string) =>
    call<string[]>((done) => admin.getChildren(path, done)).catch(() => [] as string[])
  /** The sessions watching `path`, as the server's `wchp` lists them. */
  const watchersOf = async (path: string) => {
    const member = zk.members[0]!
    const text = await fourLetterWord('127.0.0.1', member.clientPort, 'wchp', AbortSignal.timeout(10_000))
    const lines = text.split('\n')
    const sessions: bigint[] = []
    for (let at = lines.indexOf(path) + 1; at > 0 && lines[at]?.startsWith('\t'); at++)
      sessions.push(BigInt(lines[at]!.trim()))
    return sessions
  }
  const dataOf = (path: string) =>
    call<Buffer>((done) => admin.getData(path, (error, data) => done(error, data))).then((b) => b.toString())

  it("keeps a candidate as Curator's LeaderLatch does, under a node apart from the locks", async () => {
    const locks = clientOn(zk.url(PREFIX))
    const name = 'layout/é 🗳'
    const lock = await locks.acquire(name)
    // The lock of the same name is another line: the campaign does not wait for it.
    const lead = await locks.election(name).campaign({ value: 'http://[::1]:8080/é', timeout: '10s' })
    const path = electionPath(name, PREFIX)
    const nodes = await childrenOf(path)
    assert.equal(nodes.length, 1)
    const hex = lead.owner
    const uuid = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`
    assert.match(nodes[0]!, new RegExp(`^_c_${uuid}-latch-\\d{10}$`))
    assert.equal(
      await dataOf(`${path}/${nodes[0]}`),
      'http://[::1]:8080/é',
      "the data is the candidate's value",
    )
    assert.equal((await childrenOf(lockPath(name, PREFIX))).length, 1, "the lock's node is its own")
    await lead.proclaim('v2')
    // The proclaim goes to the election's node, tagged with the term; the candidate's child is left alone
    // (a Curator LeaderLatch behind it watches it for its deletion only).
    assert.equal(await dataOf(path), `proclaimed by term ${lead.term}\nv2`)
    assert.equal(await dataOf(`${path}/${nodes[0]}`), 'http://[::1]:8080/é')
    const view = await locks.election(name).leader()
    assert.ok(view.leader && view.owner === lead.owner && view.term === lead.term && view.value === 'v2')
    await Promise.all([lead.resign(), lock.release()])
    assert.deepEqual(await childrenOf(path), [])
  })

  it("refuses an election on a path holding a lock's children", async () => {
    const name = 'mixed'
    const path = electionPath(name, PREFIX)
    await call((done) => admin.mkdirp(path, done))
    const made = await call<string>((done) =>
      admin.create(`${path}/_c_00000000-0000-0000-0000-000000000000-lock-`, Buffer.from(''), 3, done),
    )
    const locks = clientOn(zk.url(PREFIX))
    await assert.rejects(locks.election(name).campaign({ timeout: '10s' }), (error: Error) => {
      assert.ok(error instanceof BackendUnavailableError, String(error))
      assert.match(error.message, /a path is either a lock or an election/)
      assert.equal(error.retryable, false)
      return true
    })
    await assert.rejects(locks.election(name).leader(), /a path is either a lock or an election/)
    await call((done) => admin.remove(made, -1, (error) => done(error, undefined)))
  })

  it("refuses a proclaim once the leader lost its node; a stale proclaim writes nothing, an old one isn't shown", async () => {
    const [a, b] = [clientOn(zk.url(PREFIX)), clientOn(zk.url(PREFIX))]
    const name = 'taken-over'
    const path = electionPath(name, PREFIX)
    const old = await a.election(name).campaign({ value: 'old' })
    await old.proclaim('old-2')
    const [node] = await childrenOf(path)
    await call((done) => admin.remove(`${path}/${node}`, -1, (error) => done(error, undefined)))
    const next = await b.election(name).campaign({ value: 'next', timeout: '30s' })
    assert.ok(next.term > old.term)
    await assert.rejects(old.proclaim('stale'), LockLostError)
    const nodes = await childrenOf(path)
    assert.equal(nodes.length, 1)
    assert.equal(await dataOf(`${path}/${nodes[0]}`), 'next')
    // The old leader's proclaimed value is tagged with its term: not taken for the new leader's.
    assert.equal(await dataOf(path), `proclaimed by term ${old.term}\nold-2`)
    const view = await b.election(name).leader()
    assert.ok(
      view.leader && view.term === next.term && view.value === 'next',
      JSON.stringify(view, (_, v) => String(v)),
    )
    await next.resign()
  })

  /** A JVM with one Curator client, its printed lines gathered; `ask` sends a command. */
  const latch = async () => {
    const [java, args] = javaCommand(build, 'CuratorLatch', [zk.connectString])
    const child = spawn(java, args, { stdio: 'pipe' })
    javas.push(child)
    const lines: string[] = []
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    createInterface({ input: child.stdout }).on('line', (line) => lines.push(line))
    const said = (prefix: string) =>
      waitUntil(
        () => lines.some((l) => l.startsWith(prefix)),
        () => `Curator to say ${prefix}: ${lines.join(' | ')} ${stderr}`,
        WITHIN,
      )
    const ask = async (command: string, answer: string) => {
      lines.length = 0
      child.stdin.write(`${command}\n`)
      await said(answer)
      return lines.find((l) => l.startsWith(answer))!
    }
    await said('ready')
    const sessionId = BigInt(`0x${lines.find((l) => l.startsWith('ready'))!.split(' ')[1]}`)
    return { ask, said, lines, child, sessionId }
  }

  it("Curator's LeaderLatch leads first: fencelock sees its id, waits in line, leads once it closes", async () => {
    const name = 'curator-first'
    const path = electionPath(name, PREFIX)
    const java = await latch()
    await java.ask(`start ${path} java-1`, 'started')
    await java.said('isLeader')
    const locks = clientOn(zk.url(PREFIX))
    const view = await locks.election(name).leader()
    assert.ok(
      view.leader && view.value === 'java-1' && !view.isMe,
      JSON.stringify(view, (_, v) => String(v)),
    )
    const campaign = awaitLater(locks.election(name).campaign({ value: 'fencelock' }))
    await pollUntil(
      () => childrenOf(path),
      (nodes) => nodes.length === 2,
      WITHIN,
    )
    assert.match(await java.ask('leader', 'leader'), /^leader true java-1$/, 'Curator still sees itself lead')
    await java.ask('close', 'closed')
    const lead = await campaign
    assert.ok(view.leader && lead.term > view.term!)
    java.child.stdin.write('quit\n')
    await lead.resign()
  })

  it("fencelock leads first: Curator's LeaderLatch sees its value, waits, and leads once it resigns", async () => {
    const name = 'fencelock-first'
    const path = electionPath(name, PREFIX)
    const locks = clientOn(zk.url(PREFIX))
    const lead = await locks.election(name).campaign({ value: 'fencelock-1' })
    await lead.proclaim('fencelock-2')
    const java = await latch()
    await java.ask(`start ${path} java-2`, 'started')
    await pollUntil(
      () => childrenOf(path),
      (nodes) => nodes.length === 2,
      WITHIN,
    )
    // Curator reads the participant id from the leader's child: the value it campaigned with.
    assert.equal(await java.ask('leader', 'leader'), 'leader true fencelock-1')
    assert.ok(!java.lines.includes('isLeader'), 'Curator waits behind the fencelock leader')
    await lead.resign()
    await java.said('isLeader')
    const view = await locks.election(name).leader()
    assert.ok(view.leader && view.value === 'java-2' && view.term! > lead.term && !view.isMe)
    java.child.stdin.write('quit\n')
  })

  it("proclaims while Curator's LeaderLatch waits behind: it still leads once fencelock resigns", async () => {
    const name = 'proclaim-before-curator'
    const path = electionPath(name, PREFIX)
    const locks = clientOn(zk.url(PREFIX))
    const lead = await locks.election(name).campaign({ value: 'fencelock-1' })
    const java = await latch()
    await java.ask(`start ${path} java-3`, 'started')
    await pollUntil(
      () => childrenOf(path),
      (nodes) => nodes.length === 2,
      WITHIN,
    )
    // LeaderLatch sets its watch on our node in the background, after its listing: the proclaim must come
    // after it (the server lists the sessions watching each path).
    const [leaderNode] = await childrenOf(path).then((nodes) => inLine(nodes, LATCH_NAME))
    await pollUntil(
      () => watchersOf(`${path}/${leaderNode}`),
      (sessions) => sessions.includes(java.sessionId),
      WITHIN,
    )
    await lead.proclaim('fencelock-2')
    const seen = await locks.election(name).leader()
    assert.ok(
      seen.leader && seen.value === 'fencelock-2' && seen.isMe,
      'fencelock observers see the proclaim',
    )
    assert.ok(!java.lines.includes('isLeader'), 'Curator waits behind the fencelock leader')
    await lead.resign()
    await java.said('isLeader')
    const view = await locks.election(name).leader()
    assert.ok(view.leader && view.value === 'java-3' && view.term! > lead.term && !view.isMe)
    java.child.stdin.write('quit\n')
  })

  it("wakes an observer by ZooKeeper's watches on each change, not by its fallback read", async () => {
    const backend = zookeeperBackend({ client: admin, prefix: PREFIX })
    const facet = backend.election!
    let woken = 0
    const counting: ElectionFacet = {
      ...facet,
      watch: async (key, signal) => {
        await facet.watch!(key, signal)
        if (!signal.aborted) woken++
      },
    }
    const watcher = clientOn({ ...backend, election: counting })
    const leaders = clientOn(zk.url(PREFIX))
    const name = 'watched'
    const lead = await leaders.election(name).campaign({ value: 'a' })
    const stop = new AbortController()
    const views = watcher.election(name).observe({ signal: stop.signal })[Symbol.asyncIterator]()
    const shown = (v: LeaderView) => (v.leader ? `leader ${v.value}` : 'vacant')
    assert.equal(shown((await views.next()).value as LeaderView), 'leader a')
    await lead.proclaim('b')
    assert.equal(shown((await views.next()).value as LeaderView), 'leader b')
    await lead.resign()
    assert.equal(shown((await views.next()).value as LeaderView), 'vacant')
    assert.ok(woken >= 2, `woken by a watch ${woken} times`)
    stop.abort()
    await views.return?.()
  })
})
