import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { lockPath } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, type ListedLock, type Lock, type LockClient } from '../../../src/index.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import {
  type CuratorBuild,
  type CuratorProcess,
  compileCurator,
  startCurator,
} from '../../support/curator.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil } from '../../support/wait.js'

/**
 * fencelock and Apache Curator's `InterProcessMutex` (Curator 5.4, a Java child process: test/support/curator.ts)
 * share one lock on one 3-member ensemble, both ways: whoever holds it, the other waits in the same queue
 * and is granted after the release (or the holder's session expiry), in the queue's order. The rules both
 * sides follow are Curator's (LockInternals / StandardLockInternalsDriver / ProtectedUtils): lock nodes
 * `<prefix>/<key>/_c_<uuid>-lock-<sequence>`, ordered by the sequence after the last `lock-`, the first holds.
 * An operator's list and break treat a Curator holder as inspect does (its node's name is the owner).
 * Every assertion is about order ("X was still waiting when Y released", "granted in this order"), never
 * about how long anything took.
 */

/** A node Curator creates, or fencelock must create to be seen as one of Curator's (a protected node). */
const LOCK_NODE = /^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-\d{10}$/
const PREFIX = '/fencelock-curator'
/** The generous bound of every wait: a liveness limit on a loaded 2-core machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

describe('zookeeper: interop with Curator InterProcessMutex', { timeout: 240_000 }, () => {
  let ensemble: ZooKeeperEnsemble
  let build: CuratorBuild
  let client: LockClient | undefined
  /** fencelock's client on the ensemble, made on first use. */
  const locks = () => {
    client ??= createLockClient(ensemble.url(PREFIX), { ttl: '10s' })
    return client
  }
  const curators: CuratorProcess[] = []
  /** A Curator client with its own session (one JVM each). */
  const curator = async () => {
    const c = await startCurator(build, ensemble.connectString, { sessionTimeoutMs: 10_000 })
    curators.push(c)
    return c
  }
  /** The znode under which both put the lock nodes of `key` (the path a Curator user passes). */
  const queueOf = (key: string) => lockPath(key, PREFIX)
  /** The queue of `key` in Curator's order, as node names; `watcher` is any Curator process. */
  const queue = (watcher: CuratorProcess, key: string) => watcher.participants(queueOf(key))
  /**
   * Waits until the queue of `key` has `length` nodes, and returns it. With `before` (the queue before one
   * more joined), checks that the joiner's node came last: Curator's order is the order of arrival.
   */
  const queued = async (watcher: CuratorProcess, key: string, length: number, before?: string[]) => {
    const nodes = await pollUntil(
      () => queue(watcher, key),
      (q) => q.length === length,
      WITHIN,
    )
    assert.equal(nodes.length, length, `the queue of ${key}: ${nodes.join(', ')}`)
    if (before) assert.deepEqual(nodes.slice(0, -1), before, 'the newcomer is last in line')
    return nodes
  }
  /** fencelock's acquire, with a flag that says whether it was granted yet. */
  const fencelockWaits = (key: string) => {
    const state: { lock?: Lock } = {}
    const granted = locks()
      .acquire(key, { timeout: '60s' })
      .then((lock) => {
        state.lock = lock
        return lock
      })
    return { granted, state }
  }

  before(async () => {
    build = compileCurator()
    ensemble = await startZooKeeper(3)
  })
  after(async () => {
    await Promise.all(curators.map((c) => c.stop()))
    await client?.close()
    await ensemble?.destroy()
    build?.cleanup()
  })

  it('two Curator clients exclude each other; their nodes and order are the ones fencelock follows', async () => {
    const [first, second] = await Promise.all([curator(), curator()])
    const key = 'curator-only'
    const held = await first!.acquire(queueOf(key), 30_000)
    assert.ok(held, 'the first Curator client got the free lock')
    const name = held.slice(queueOf(key).length + 1)
    assert.match(name, LOCK_NODE)
    assert.ok(await first!.isProtected(name), 'Curator takes its own node for a protected node')
    // The second one times out behind the holder, and takes its node away when it gives up.
    assert.equal(await second!.acquire(queueOf(key), 300), undefined)
    assert.deepEqual(await queue(first!, key), [name])
    const waiting = awaitLater(second!.acquire(queueOf(key), 30_000))
    const [, theirs] = await queued(first!, key, 2)
    await first!.release()
    assert.equal(await waiting, `${queueOf(key)}/${theirs}`, 'the next in line got it')
    await second!.release()
  })

  it('(a) Curator holds: fencelock waits in line behind it and is granted only after Curator releases', async () => {
    const java = await curator()
    const key = 'curator-first'
    const held = await java.acquire(queueOf(key), 30_000)
    assert.ok(held)
    const waiter = fencelockWaits(key)
    // fencelock's node is queued behind Curator's, as Curator itself orders them.
    const [head, ours] = await queued(java, key, 2)
    assert.equal(`${queueOf(key)}/${head}`, held)
    assert.match(ours!, LOCK_NODE)
    assert.equal(waiter.state.lock, undefined, 'fencelock waited while Curator held the lock')
    await java.release()
    const lock = await waiter.granted
    assert.deepEqual(await queue(java, key), [ours], 'fencelock holds through the node it queued')
    await lock.release()
    assert.deepEqual(await queue(java, key), [])
  })

  it('(b) fencelock holds: Curator times out, then waits in line and gets the lock after the release', async () => {
    const java = await curator()
    const key = 'fencelock-first'
    const lock = await locks().acquire(key)
    const [ours] = await queue(java, key)
    assert.match(ours!, LOCK_NODE)
    assert.ok(await java.isProtected(ours!), "Curator takes fencelock's node for one of its protected nodes")
    assert.equal(await java.acquire(queueOf(key), 500), undefined, "Curator's acquire timed out")
    assert.deepEqual(await queue(java, key), [ours], 'Curator removed its node when it gave up')
    const waiting = awaitLater(java.acquire(queueOf(key), 30_000))
    const [, theirs] = await queued(java, key, 2)
    let curatorGot = false
    void waiting.then(() => {
      curatorGot = true
    })
    // The queued node is not yet a grant: Curator is still waiting while fencelock holds.
    assert.equal(curatorGot, false)
    await lock.release()
    assert.equal(await waiting, `${queueOf(key)}/${theirs}`)
    await java.release()
  })

  it('(c, d) a mixed queue is served first come, first served, in the order Curator sorts the nodes', async () => {
    const [c1, c2] = await Promise.all([curator(), curator()])
    const key = 'mixed'
    const grants: string[] = []
    const first = await locks().acquire(key)
    grants.push('fencelock 1')
    const alone = await queued(c1!, key, 1)
    // Join one at a time, each once the previous one's node is in the queue: the arrival order is known.
    const curator1 = c1!.acquire(queueOf(key), 60_000).then((path) => {
      grants.push('curator 1')
      return path
    })
    const one = await queued(c1!, key, 2, alone)
    const fencelock2 = fencelockWaits(key)
    void fencelock2.granted.then(() => grants.push('fencelock 2'))
    const two = await queued(c1!, key, 3, one)
    const curator2 = c2!.acquire(queueOf(key), 60_000).then((path) => {
      grants.push('curator 2')
      return path
    })
    const nodes = await queued(c1!, key, 4, two)
    // (d) Every node, fencelock's and Curator's, has Curator's protected name; Curator's order (by the
    // sequence after the last "lock-") is the order of arrival, which queued() checked at each join.
    for (const node of nodes) {
      assert.match(node, LOCK_NODE)
      assert.ok(await c2!.isProtected(node), `Curator takes ${node} for a protected node`)
    }
    assert.deepEqual(grants, ['fencelock 1'])

    await first.release()
    assert.equal(await curator1, `${queueOf(key)}/${nodes[1]}`)
    assert.deepEqual(grants, ['fencelock 1', 'curator 1'])
    assert.deepEqual(await queue(c1!, key), nodes.slice(1))

    await c1!.release()
    const second = await fencelock2.granted
    assert.ok(
      second.fence > first.fence,
      'fences increase across the grants between (the czxids of our nodes)',
    )
    assert.deepEqual(grants, ['fencelock 1', 'curator 1', 'fencelock 2'])
    assert.deepEqual(await queue(c1!, key), nodes.slice(2), 'fencelock was granted through its third node')

    await second.release()
    assert.equal(await curator2, `${queueOf(key)}/${nodes[3]}`)
    assert.deepEqual(grants, ['fencelock 1', 'curator 1', 'fencelock 2', 'curator 2'])
    await c2!.release()
  })

  it('(g) an atomic set waits for a Curator holder with no node of its own, then holds through nodes Curator takes for its own', async () => {
    const java = await curator()
    const keys = ['atomic-curator:a', 'atomic-curator:b']
    const held = await java.acquire(queueOf(keys[1]!), 30_000)
    assert.ok(held)
    const state: { all?: Awaited<ReturnType<LockClient['acquireAll']>> } = {}
    const granted = awaitLater(
      locks()
        .acquireAll(keys, { atomic: true, timeout: '60s' })
        .then((all) => {
          state.all = all
          return all
        }),
    )
    // Refused while Curator holds b: it leaves no node in either line (it never waits in one).
    for (let check = 0; check < 5; check++) {
      assert.deepEqual(await queue(java, keys[0]!), [], 'no node of the set in the free line')
      assert.deepEqual(await queue(java, keys[1]!), [held.slice(queueOf(keys[1]!).length + 1)])
    }
    assert.equal(state.all, undefined, 'the set waited while Curator held a key')
    await java.release()
    const all = await granted
    for (const key of keys) {
      const [ours] = await queue(java, key)
      assert.match(ours!, LOCK_NODE)
      assert.ok(await java.isProtected(ours!), "Curator takes the set's node for one of its protected nodes")
    }
    // Curator times out behind the set's node, as behind any holder's.
    assert.equal(await java.acquire(queueOf(keys[0]!), 500), undefined, "Curator's acquire timed out")
    await all.release()
    assert.ok(await java.acquire(queueOf(keys[0]!), 30_000), 'Curator gets the key once the set released it')
    await java.release()
  })

  it('(e) a Curator holder whose session expires lets fencelock in (its ephemeral node goes with the session)', async () => {
    const java = await curator()
    const watcher = await curator()
    const key = 'curator-expires'
    const held = await java.acquire(queueOf(key), 30_000)
    assert.ok(held)
    const waiter = fencelockWaits(key)
    const [, ours] = await queued(watcher, key, 2)
    assert.equal(waiter.state.lock, undefined, 'fencelock waits while the Curator session lives')
    // Curator itself does not notice: it never watches its own node. The session is the lease.
    await java.expire()
    const lock = await waiter.granted
    assert.deepEqual(await queue(watcher, key), [ours])
    await lock.release()
  })

  it('(f) list shows a Curator holder as inspect does; break frees it for the next in line, fence kept', async () => {
    const java = await curator()
    const key = 'curator-broken'
    const held = await java.acquire(queueOf(key), 30_000)
    assert.ok(held)
    const theirs = held.slice(queueOf(key).length + 1)
    const waiter = fencelockWaits(key)
    const [, ours] = await queued(java, key, 2)
    // Read on another member than Curator's: it shows the node once that member has applied it.
    const listed = await pollUntil(
      async () => {
        const found: ListedLock[] = []
        for await (const lock of locks().list(key)) found.push(lock)
        return found
      },
      (found) => found.length === 1,
      WITHIN,
    )
    const [lock] = listed
    assert.equal(lock?.key, key)
    assert.equal(lock?.owner, theirs, "Curator's node names the holder")
    assert.match(lock?.note ?? '', /Curator/)
    assert.deepEqual(lock, { key, ...(await locks().inspect(key)) }, 'what inspect says')
    const broken = await locks().break(key, { fence: lock!.fence! })
    assert.equal(broken.broken, true)
    assert.equal(broken.lease?.owner, theirs)
    // Curator does not watch its own node: it is the fencelock waiter behind it that notices.
    const granted = await waiter.granted
    assert.ok(granted.fence > lock!.fence!, 'the next grant has a greater fence')
    assert.deepEqual(await queue(java, key), [ours])
    await granted.release()
  })
})
