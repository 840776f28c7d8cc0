import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { after, describe, it } from 'node:test'
import { EtcdElectionQueue } from '../../../src/backends/etcd/election.js'
import { electionPrefix, lockPrefix } from '../../../src/backends/etcd/layout.js'
import type { ElectionFacet, LockBackend } from '../../../src/core/backend.js'
import { type LeaderView, LockLostError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil, waitUntil } from '../../support/wait.js'
import { etcdTestCluster } from './fixture.js'

/**
 * Leader election on etcd, what the conformance cases cannot see: the keys on the store (Go's `Election`
 * layout, apart from the locks), proclaim refused by the store once another leads, observers woken by
 * etcd's watch, and `etcdctl elect` (Go's `concurrency.Election`) and fencelock in one line, both ways.
 */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

describe('etcd: leader election', { timeout: 240_000 }, () => {
  const children: ChildProcess[] = []
  // Registered before the cluster's own, so it runs first: no etcdctl outlives the cluster.
  after(() => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  const etcd = etcdTestCluster()
  const backendOf = () => etcd.backend()
  const clientOn = (backend: LockBackend, ttl = '10s') => etcd.client(backend, { ttl })

  /** `etcdctl` with the cluster's endpoints, its output gathered. */
  const etcdctl = (args: string[]) => {
    const child = spawn('etcdctl', [`--endpoints=${etcd.cluster.endpoints}`, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    children.push(child)
    let out = ''
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString()
    })
    child.stderr.on('data', (chunk: Buffer) => {
      out += chunk.toString()
    })
    return { child, output: () => out }
  }
  const exited = (child: ChildProcess) =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve()
      else child.once('exit', () => resolve())
    })

  it('keeps a candidate as Go does (<lease hex>-<owner>, the value) under a prefix apart from the locks', async () => {
    const locks = clientOn(backendOf())
    const name = 'layout/é 🗳'
    const lock = await locks.acquire(name)
    // The lock of the same name is another line: the campaign does not wait for it.
    const lead = await locks.election(name).campaign({ value: 'http://[::1]:8080/é', timeout: '10s' })
    const keys = await etcd.keysUnder(electionPrefix(name))
    assert.equal(keys.length, 1)
    const [key] = keys
    assert.match(key!.key.slice(electionPrefix(name).length), new RegExp(`^[0-9a-f]+-${lead.owner}$`))
    assert.equal(key!.value, 'http://[::1]:8080/é')
    assert.notEqual(key!.lease, '0', 'on its session lease')
    assert.equal(key!.create, lead.term, 'the term is the create revision')
    assert.equal((await etcd.keysUnder(lockPrefix(name))).length, 1, "the lock's key is its own")
    assert.ok(!electionPrefix(name).startsWith(lockPrefix(name)))
    await lead.proclaim('v2')
    const [after] = await etcd.keysUnder(electionPrefix(name))
    assert.equal(after!.value, 'v2')
    assert.equal(after!.create, lead.term, 'a proclaim keeps the key (and the term)')
    assert.equal(after!.lease, key!.lease, 'a proclaim keeps the lease')
    await Promise.all([lead.resign(), lock.release()])
    assert.deepEqual(await etcd.keysUnder(electionPrefix(name)), [])
  })

  it('refuses a proclaim on the store once another candidate leads', async () => {
    const [a, b] = [clientOn(backendOf()), clientOn(backendOf())]
    const name = 'taken-over'
    const old = await a.election(name).campaign({ value: 'old' })
    // The leader's key deleted behind its back (an operator, an expired lease seen late).
    const [key] = await etcd.keysUnder(electionPrefix(name))
    await etcd.admin.delete().key(key!.key).exec()
    const next = await b.election(name).campaign({ value: 'next', timeout: '30s' })
    assert.ok(next.term > old.term)
    await assert.rejects(old.proclaim('stale'), LockLostError)
    const keys = await etcd.keysUnder(electionPrefix(name))
    assert.deepEqual(
      keys.map((k) => k.value),
      ['next'],
      'the stale proclaim wrote nothing',
    )
    await next.resign()
  })

  it("guards a proclaim on the store by the key's create revision (Go's Proclaim)", async () => {
    const queue = new EtcdElectionQueue(etcd.admin, 'fencelock/')
    const name = `${electionPrefix('guarded')}1-owner`
    const first = await etcd.admin.put(name).value('first').exec()
    await etcd.admin.delete().key(name).exec()
    // The same name made again (a new create revision): no longer the entry of that term.
    await etcd.admin.put(name).value('second').exec()
    const stale = { queue: electionPrefix('guarded'), name, position: BigInt(first.header.revision) }
    assert.equal(await queue.proclaim(stale, 'stale'), false)
    assert.equal((await etcd.keysUnder(electionPrefix('guarded')))[0]!.value, 'second')
    const [now] = await etcd.keysUnder(electionPrefix('guarded'))
    assert.equal(await queue.proclaim({ ...stale, position: now!.create }, 'proclaimed'), true)
    assert.equal((await etcd.keysUnder(electionPrefix('guarded')))[0]!.value, 'proclaimed')
    await etcd.admin.delete().key(name).exec()
  })

  it("wakes an observer by etcd's watch on each change, not by its fallback read", async () => {
    const backend = backendOf()
    const facet = backend.election!
    let reads = 0
    let woken = 0
    const counting: ElectionFacet = {
      ...facet,
      inspect: (key, signal) => {
        reads++
        return facet.inspect(key, signal)
      },
      watch: async (key, signal) => {
        await facet.watch!(key, signal)
        if (!signal.aborted) woken++
      },
    }
    const watcher = clientOn({ ...backend, election: counting })
    const leaders = clientOn(backendOf())
    const name = 'watched'
    const lead = await leaders.election(name).campaign({ value: 'a' })
    const stop = new AbortController()
    const views = watcher.election(name).observe({ signal: stop.signal })[Symbol.asyncIterator]()
    const shown = (v: LeaderView) => (v.leader ? `leader ${v.value}` : 'vacant')
    assert.equal(shown((await views.next()).value as LeaderView), 'leader a')
    const before = woken
    await lead.proclaim('b')
    assert.equal(shown((await views.next()).value as LeaderView), 'leader b')
    await lead.resign()
    assert.equal(shown((await views.next()).value as LeaderView), 'vacant')
    // Each change came through the watch: the fallback read comes only after 5 s without one.
    assert.ok(woken - before >= 2, `woken by the watch ${woken - before} times`)
    assert.ok(reads <= 2 * woken + 1, `${reads} reads for ${woken} wake-ups`)
    stop.abort()
    await views.return?.()
  })

  it('etcdctl elect leads before fencelock: observers see its value; fencelock leads once it resigns', async () => {
    const name = 'with-etcdctl'
    const pfx = electionPrefix(name).slice(0, -1)
    const go = etcdctl(['elect', pfx, 'go-leader'])
    await waitUntil(() => go.output().includes('go-leader'), 'etcdctl to lead', WITHIN)
    const locks = clientOn(backendOf())
    const view = await pollUntil(
      () => locks.election(name).leader(),
      (v) => v.leader,
      WITHIN,
    )
    assert.ok(
      view.leader && view.value === 'go-leader',
      JSON.stringify(view, (_, v) => String(v)),
    )
    const campaign = awaitLater(locks.election(name).campaign({ value: 'fencelock' }))
    const waiting = await pollUntil(
      () => etcd.keysUnder(electionPrefix(name)),
      (keys) => keys.length === 2,
      WITHIN,
    )
    assert.equal(waiting.length, 2, 'the fencelock candidate waits in the same line')
    // etcdctl resigns and revokes its lease on SIGINT.
    go.child.kill('SIGINT')
    const lead = await campaign
    assert.ok(lead.term > (view.leader ? view.term! : 0n))
    await exited(go.child)
    await lead.resign()
  })

  it('fencelock leads before etcdctl elect: etcdctl observes it, and leads once it resigns', async () => {
    const name = 'for-etcdctl'
    const pfx = electionPrefix(name).slice(0, -1)
    const locks = clientOn(backendOf())
    const lead = await locks.election(name).campaign({ value: 'fencelock-leader' })
    const observer = etcdctl(['elect', '-l', pfx])
    await waitUntil(() => observer.output().includes('fencelock-leader'), 'etcdctl to observe', WITHIN)
    const go = etcdctl(['elect', pfx, 'go-next'])
    await pollUntil(
      () => etcd.keysUnder(electionPrefix(name)),
      (keys) => keys.length === 2,
      WITHIN,
    )
    assert.ok(!go.output().includes('go-next'), 'etcdctl waits behind the fencelock leader')
    const watch = locks.election(name)
    await lead.proclaim('fencelock-proclaimed')
    await waitUntil(
      () => observer.output().includes('fencelock-proclaimed'),
      'etcdctl to see the proclaim',
      WITHIN,
    )
    await lead.resign()
    await waitUntil(() => go.output().includes('go-next'), 'etcdctl to lead', WITHIN)
    const view = await pollUntil(
      () => watch.leader(),
      (v) => v.leader && v.value === 'go-next',
      WITHIN,
    )
    assert.ok(view.leader && view.term! > lead.term && !view.isMe)
    await waitUntil(() => observer.output().includes('go-next'), 'etcdctl to observe it', WITHIN)
    go.child.kill('SIGINT')
    observer.child.kill('SIGINT')
    await Promise.all([exited(go.child), exited(observer.child)])
  })
})
