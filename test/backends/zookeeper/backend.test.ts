import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { promisify } from 'node:util'
import zookeeper from 'node-zookeeper-client'
import { fromUrl, zookeeperBackend } from '../../../src/backends/zookeeper/index.js'
import { inLine, lockPath, protectedName } from '../../../src/backends/zookeeper/layout.js'
import { newOwnerId } from '../../../src/core/owner.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { call, connectAdmin, withAdmin } from '../../kits/zookeeper.js'
import { MAX_SESSION_MS, startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { awaitLater } from '../../support/later.js'
import { startProxy, type Proxy as TcpProxy } from '../../support/proxy.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'

const run = promisify(execFile)

/**
 * The ZooKeeper backend's own semantics on a standalone server: your own client (one session for every
 * ttl), a Curator-style holder it waits behind, a create whose reply was lost (a single acquire's, an atomic
 * set's multi: found again by the next attempt, or cleaned up by one given up; one unseen, then found as a
 * stray node of the acquire's own name: deleted, never waited for), `doctor` and the URL.
 */
describe('zookeeper backend', { timeout: 90_000 }, () => {
  let zk: ZooKeeperEnsemble
  const open: LockClient[] = []
  before(async () => {
    zk = await startZooKeeper(1)
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await zk.destroy()
  })

  const children = (path: string) =>
    withAdmin(zk.connectString, (admin) =>
      call<string[]>((done) => admin.getChildren(path, done)).catch(() => [] as string[]),
    )

  it('with your client: its one session carries every lock, validity is its session timeout, and it stays open', async () => {
    const user = await connectAdmin(zk.connectString, { sessionTimeout: 4000 })
    try {
      const locks = createLockClient(zookeeperBackend({ client: user, prefix: '/mine' }), { ttl: '30s' })
      const a = await locks.acquire('shared')
      assert.ok(
        a.validUntil - performance.now() <= user.getSessionTimeout(),
        'no validity beyond the session',
      )
      const b = awaitLater(locks.acquire('shared', { timeout: '10s' }))
      await a.release()
      const second = await b
      assert.ok(second.fence > a.fence)
      const [node] = await children(lockPath('shared', '/mine'))
      const stat = await call<zookeeper.Stat>((done) =>
        user.exists(`${lockPath('shared', '/mine')}/${node}`, done),
      )
      assert.equal(
        stat.ephemeralOwner.toString('hex'),
        user.getSessionId().toString('hex'),
        'on your session',
      )
      await second.release()
      await locks.close()
      assert.equal(user.getState().name, 'SYNC_CONNECTED', 'your client stays open')
    } finally {
      user.close()
    }
  })

  it('waits behind a node Curator made (its data an IP address), and says who holds it', async () => {
    const locks = createLockClient(zk.url(), { ttl: '5s' })
    open.push(locks)
    const path = lockPath('curator')
    const admin = await connectAdmin(zk.connectString)
    try {
      await call((done) => admin.mkdirp(path, done))
      const curator = await call<string>((done) =>
        admin.create(
          `${path}/_c_3f1b9a7e-0000-4000-8000-000000000001-lock-`,
          Buffer.from('10.0.0.7'),
          zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL,
          done,
        ),
      )
      const info = await locks.inspect('curator')
      assert.equal(info.held, true)
      assert.match(info.note ?? '', /not written by fencelock/)
      assert.equal(await locks.tryAcquire('curator'), null, 'the Curator holder excludes us')
      const waiting = awaitLater(locks.acquire('curator', { timeout: '10s' }))
      await waitUntil(async () => (await children(path)).length === 2, 'our node in line behind Curator')
      await call((done) => admin.remove(curator, -1, (error) => done(error, undefined)))
      const lock = await waiting
      await lock.release()
    } finally {
      admin.close()
    }
  })

  it('finds its own node after a create whose reply was lost, instead of queueing twice', async () => {
    const proxy = await startProxy(zk.members[0]!.clientPort)
    try {
      const locks = createLockClient(`zookeeper://127.0.0.1:${proxy.port}`, { ttl: '5s' })
      open.push(locks)
      // The 5 s session first (its handshake must pass; it stays for reuse), then every reply is
      // swallowed: the create lands unheard.
      await (await locks.acquire('warm-up')).release()
      const path = lockPath('lost-reply')
      await withAdmin(zk.connectString, (admin) => call((done) => admin.mkdirp(path, done)))
      proxy.mode = 'drop-replies'
      const pending = awaitLater(locks.acquire('lost-reply', { timeout: '20s' }))
      await waitUntil(async () => (await children(path)).length === 1, 'the create to land')
      // The connection drops (its pending create fails as a connection loss); the client reconnects.
      proxy.mode = 'pass'
      proxy.cut()
      const lock = await pending
      const nodes = await children(path)
      assert.equal(nodes.length, 1, `one node for one acquire: ${nodes}`)
      assert.ok(nodes[0]!.startsWith(protectedName(lock.owner)))
      await lock.release()
    } finally {
      await proxy.close()
    }
  })

  const counts = async (keys: readonly string[]) =>
    Promise.all(keys.map(async (key) => (await children(lockPath(key))).length))

  /**
   * An atomic set's lock client through `proxy` (its session made, the keys' lock nodes there) whose atomic set's multi
   * lands unheard: the replies to the set's listings pass, every reply from its multi on is swallowed.
   */
  async function landedUnheard(proxy: TcpProxy, keys: readonly string[], signal?: AbortSignal) {
    const locks = createLockClient(`zookeeper://127.0.0.1:${proxy.port}`, { ttl: '5s' })
    open.push(locks)
    await (await locks.acquire('warm-up')).release()
    for (const key of keys)
      await withAdmin(zk.connectString, (admin) => call((done) => admin.mkdirp(lockPath(key), done)))
    // The listings before the multi pass; from the multi on, replies are dropped.
    let multiSent = false
    proxy.filter = (chunk, direction) => {
      // A request's header: its length, xid and op code (14 is a multi).
      if (direction === 'request' && chunk.length >= 12 && chunk.readInt32BE(8) === 14) multiSent = true
      return !(direction === 'reply' && multiSent)
    }
    const pending = awaitLater(
      locks.acquireAll(keys, { atomic: true, timeout: '20s', ...(signal ? { signal } : {}) }),
    )
    await waitUntil(async () => (await counts(keys)).every((n) => n === 1), 'the multi to land')
    return { locks, pending }
  }

  it('the next attempt finds the nodes the multi made and is granted them, one node per line', async () => {
    const proxy = await startProxy(zk.members[0]!.clientPort)
    try {
      const keys = ['atomic-lost:a', 'atomic-lost:b']
      const { pending } = await landedUnheard(proxy, keys)
      // The connection drops (the pending multi fails as a connection loss); the client reconnects.
      proxy.filter = undefined
      proxy.cut()
      const all = await pending
      for (const key of keys) {
        const nodes = await children(lockPath(key))
        assert.equal(nodes.length, 1, `${key}: one node for one acquisition: ${nodes}`)
        assert.ok(nodes[0]!.startsWith(protectedName(all.locks.get(key)!.owner)))
      }
      await all.release()
    } finally {
      await proxy.close()
    }
  })

  it('an acquisition given up after the lost reply leaves no node in any line, its client still open', async () => {
    const proxy = await startProxy(zk.members[0]!.clientPort)
    try {
      const keys = ['atomic-given-up:a', 'atomic-given-up:b']
      const controller = new AbortController()
      const { pending } = await landedUnheard(proxy, keys, controller.signal)
      const reason = new Error('given up')
      controller.abort(reason)
      await assert.rejects(pending, (e) => e === reason)
      proxy.filter = undefined
      proxy.cut()
      // The session lives on (its client reconnects): only the clean-up can empty the lines.
      await waitUntil(
        async () => (await counts(keys)).every((n) => n === 0),
        'the clean-up to delete the nodes',
        {
          withinMs: 30_000,
        },
      )
    } finally {
      await proxy.close()
    }
  })

  it("a stray node of the set's own name is deleted, never waited for", async () => {
    // What a multi whose reply was lost leaves when the listing after it did not see it yet (a server
    // behind the leader): a node with the set's name that the set does not know. Waited for as another's,
    // it would hold the set (and every acquirer of its keys) for as long as the session lives.
    const backend = await fromUrl(new URL(zk.url()))
    const admin = await connectAdmin(zk.connectString)
    try {
      const keys = ['atomic-stray:a', 'atomic-stray:b']
      const owner = newOwnerId()
      for (const key of keys) await call((done) => admin.mkdirp(lockPath(key), done))
      const stray = await call<string>((done) =>
        admin.create(
          `${lockPath(keys[0]!)}/${protectedName(owner)}`,
          Buffer.from(owner),
          zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL,
          done,
        ),
      )
      const reqs = keys.map((key) => ({ key, owner, ttlMs: 5000 }))
      let result: Awaited<ReturnType<NonNullable<typeof backend.multiKey>['tryAcquireAll']>> | undefined
      for (let i = 0; i < 3 && !result?.granted; i++) {
        result = await backend.multiKey!.tryAcquireAll(reqs, AbortSignal.timeout(20_000))
      }
      assert.ok(result?.granted, 'granted, not waiting behind its own stray node')
      const line = await children(lockPath(keys[0]!))
      assert.equal(line.length, 1, `one node in the line: ${line}`)
      assert.notEqual(`${lockPath(keys[0]!)}/${line[0]}`, stray, 'the stray is gone')
      for (const [i, grant] of result.grants.entries()) {
        const lease = { key: keys[i]!, owner, fence: grant.fence, cookie: grant.cookie }
        assert.equal(await backend.release(lease, AbortSignal.timeout(20_000)), true)
      }
    } finally {
      admin.close()
      await backend.close()
    }
  })

  it('a single acquire deletes a stray node of its own name ahead of its node, never waits for it', async () => {
    // The same stray for one key: a create whose reply was lost, unseen by the listing that looked for
    // it, and a second create behind it. Waited for as the node ahead, it would never go.
    const backend = await fromUrl(new URL(zk.url()))
    const admin = await connectAdmin(zk.connectString)
    try {
      const key = 'single-stray'
      const owner = newOwnerId()
      await call((done) => admin.mkdirp(lockPath(key), done))
      const stray = await call<string>((done) =>
        admin.create(
          `${lockPath(key)}/${protectedName(owner)}`,
          Buffer.from(owner),
          zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL,
          done,
        ),
      )
      const req = { key, owner, ttlMs: 5000 }
      let result: Awaited<ReturnType<typeof backend.tryAcquire>> | undefined
      for (let i = 0; i < 3 && !result?.granted; i++) {
        result = await backend.tryAcquire(req, AbortSignal.timeout(20_000))
      }
      assert.ok(result?.granted, 'granted, not waiting behind its own stray node')
      const line = await children(lockPath(key))
      assert.equal(line.length, 1, `one node in the line: ${line}`)
      assert.notEqual(`${lockPath(key)}/${line[0]}`, stray, 'the stray is gone')
      const lease = { key, owner, fence: result.fence, cookie: result.cookie }
      assert.equal(await backend.release(lease, AbortSignal.timeout(20_000)), true)
    } finally {
      admin.close()
      await backend.close()
    }
  })

  it('doctor names the server, its mode and the session timeout it granted against the one asked', async () => {
    const backend = await fromUrl(new URL(`${zk.url()}?sessionTimeout=${2 * MAX_SESSION_MS}ms`))
    try {
      const findings = await backend.doctor!(AbortSignal.timeout(20_000))
      const text = findings.map((f) => `${f.level}: ${f.message}`).join('\n')
      assert.match(text, /ok: 127\.0\.0\.1:\d+: ZooKeeper 3\.\d+\.\d+\S*, standalone/)
      assert.match(text, new RegExp(`warn: the server granted a session timeout of ${MAX_SESSION_MS} ms`))
    } finally {
      await backend.close()
    }
  })

  it('doctor counts the lock names under the prefix, and creates nothing', async () => {
    const url = `${zk.url()}/doctor-count`
    const backend = await fromUrl(new URL(url))
    // Released nodes stay while this test reads them (retired only an hour later).
    const locks = createLockClient(`${url}?retireAfter=1h`, { ttl: '10s' })
    open.push(locks)
    try {
      const before = (await backend.doctor!(AbortSignal.timeout(20_000))).map((f) => f.message).join('\n')
      assert.match(before, /lock names kept: 0 \(nodes under \/doctor-count, which does not exist yet\)/)
      assert.match(
        (await backend.doctor!(AbortSignal.timeout(20_000))).map((f) => f.message).join('\n'),
        /does not exist yet/,
        'doctor did not create the prefix',
      )
      for (const k of ['a', 'b']) await (await locks.acquire(k)).release()
      const after = (await backend.doctor!(AbortSignal.timeout(20_000))).map((f) => f.message).join('\n')
      assert.match(after, /lock names kept: 2 \(nodes under \/doctor-count\)/)
    } finally {
      await backend.close()
    }
  })

  it('deletes a lock node its client stopped using, keeps one in use or with a waiter, and fences still rise', async () => {
    const prefix = '/retire'
    const url = `${zk.url()}${prefix}?retireAfter=300ms`
    const [a, b] = [createLockClient(url, { ttl: '10s' }), createLockClient(url, { ttl: '10s' })]
    open.push(a, b)
    const names = ['once-1', 'once-2', 'once-3']
    const fences = new Map<string, bigint>()
    for (const k of names) {
      const lock = await a.acquire(k)
      fences.set(k, lock.fence)
      await lock.release()
    }
    await waitUntil(async () => (await children(prefix)).length === 0, 'the released lock nodes deleted', {
      withinMs: 20_000,
    })
    // A name used again after its node went gets a node again, and a fence above the one before.
    const again = await a.acquire('once-1')
    assert.ok(again.fence > fences.get('once-1')!, `fence ${again.fence} after ${fences.get('once-1')}`)
    // Released by `a` while `b` waits in line: the node has b's child, so it stays, and b gets the lock.
    const waiting = awaitLater(b.acquire('once-1', { timeout: '20s' }))
    await waitUntil(
      async () => (await children(lockPath('once-1', prefix))).length === 2,
      "b's child in line",
      {
        withinMs: 10_000,
      },
    )
    await again.release()
    const next = await waiting
    await sleep(600)
    assert.deepEqual(await children(prefix), [lockPath('once-1', prefix).slice(prefix.length + 1)])
    assert.ok(next.fence > again.fence)
    // Closing deletes what its client released, without waiting for retireAfter.
    const kept = createLockClient(`${zk.url()}${prefix}?retireAfter=1h`, { ttl: '10s' })
    await next.release()
    await (await kept.acquire('closing')).release()
    assert.ok((await children(prefix)).includes('closing'), 'released an hour before its deletion')
    await kept.close()
    await waitUntil(async () => (await children(prefix)).length === 0, 'every lock node deleted', {
      withinMs: 20_000,
    })
  })

  it('a waiter served after waiting several session timeouts keeps its place: its fence is its queued node', async () => {
    const [a, b] = [createLockClient(zk.url(), { ttl: '1s' }), createLockClient(zk.url(), { ttl: '1s' })]
    open.push(a, b)
    const held = await a.acquire('long-wait')
    const waiting = awaitLater(b.acquire('long-wait', { timeout: '20s' }))
    const path = lockPath('long-wait')
    await waitUntil(async () => (await children(path)).length === 2, "the waiter's node in line")
    const queued = await withAdmin(zk.connectString, async (admin) => {
      const [, second] = inLine(await call<string[]>((done) => admin.getChildren(path, done)))
      const stat = await call<zookeeper.Stat>((done) => admin.exists(`${path}/${second}`, done))
      return stat.czxid.readBigInt64BE(0)
    })
    // Three session timeouts: the waiter's session is known alive only through the keep-alives the
    // engine sends for it (the client's own pings are not reported).
    await sleep(3000)
    await held.release()
    const lock = await waiting
    assert.equal(lock.fence, queued, 'granted on the node it queued, not on a new one')
    assert.equal(lock.signal.aborted, false, 'held, not lost')
    await lock.release()
  })

  it("a holder's own-node watch (set by the acquire's exists) reports a deletion, also after a data change and after a hand-over", async () => {
    const [a, b] = [createLockClient(zk.url(), { ttl: '10s' }), createLockClient(zk.url(), { ttl: '10s' })]
    open.push(a, b)
    const path = lockPath('held-watch')
    const first = await a.acquire('held-watch')
    const waiting = awaitLater(b.acquire('held-watch', { timeout: '20s' }))
    await waitUntil(async () => (await children(path)).length === 2, "the waiter's node in line")
    const [mine, theirs] = inLine(await children(path))
    // Someone writes our child's data: the watch fires (not a deletion); the holder reads and watches
    // again, so a deletion after that is still reported.
    await withAdmin(zk.connectString, (admin) =>
      call((done) =>
        admin.setData(`${path}/${mine}`, Buffer.from('x'), -1, (error) => done(error, undefined)),
      ),
    )
    await sleep(200)
    assert.equal(first.signal.aborted, false, 'a data change is no loss')
    await withAdmin(zk.connectString, (admin) =>
      call((done) => admin.remove(`${path}/${mine}`, -1, (error) => done(error, undefined))),
    )
    await waitUntil(() => first.signal.aborted, "the holder's loss, after its child was deleted")
    // The waiter, granted by the hand-over (its watch was set by its own acquire's exists, while it waited):
    const second = await waiting
    assert.equal(second.signal.aborted, false)
    await withAdmin(zk.connectString, (admin) =>
      call((done) => admin.remove(`${path}/${theirs}`, -1, (error) => done(error, undefined))),
    )
    await waitUntil(() => second.signal.aborted, "the second holder's loss")
  })

  it('counts the session timeout the server granted, not the one asked, as the validity', async () => {
    // Asked 120 s; this server grants at most 60 s (maxSessionTimeout).
    const locks = createLockClient(`${zk.url()}?sessionTimeout=${2 * MAX_SESSION_MS}ms`, { ttl: '120s' })
    open.push(locks)
    const lock = await locks.acquire('clamped')
    const left = lock.validUntil - performance.now()
    assert.ok(
      left > 0 && left <= MAX_SESSION_MS,
      `validity ${left} ms within the ${MAX_SESSION_MS} ms granted`,
    )
    await lock.release()
  })

  it('a client closed while its connection is being made neither throws nor keeps the process alive', async () => {
    // node-zookeeper-client parses the connect reply of a client closed mid-handshake as a reply (and
    // throws), and keeps a connect timer of the session timeout (60 s here) unless told otherwise.
    const index = new URL('../../../src/index.js', import.meta.url).href
    const script = `
      const { createLockClient } = await import(${JSON.stringify(index)})
      // Closed after 0, 1, 2, … turns: one of them before its socket connects, others mid-handshake.
      for (let turns = 0; turns < 30; turns++) {
        const locks = createLockClient(${JSON.stringify(zk.url())}, { ttl: '60s' })
        const pending = locks.acquire('closed-early').catch(() => {})
        for (let i = 0; i < turns; i++) await new Promise((resolve) => (i % 2 ? setImmediate : queueMicrotask)(resolve))
        await locks.close()
        await pending
      }
      console.log('closed')`
    const started = performance.now()
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { timeout: 30_000 })
    assert.match(stdout, /closed/)
    assert.ok(
      performance.now() - started < 20_000,
      `exited after ${Math.round(performance.now() - started)} ms`,
    )
  })

  it('refuses unknown URL parameters and a client that is not one', async () => {
    await assert.rejects(fromUrl(new URL(`${zk.url()}?sessionTimeut=5s`)), /did you mean "sessionTimeout"/)
    assert.throws(() => zookeeperBackend({ client: {} as never }), /node-zookeeper-client/)
  })
})
