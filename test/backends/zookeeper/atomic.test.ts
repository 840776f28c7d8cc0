/**
 * ZooKeeper's atomic multi-key step, one multi over the keys' lines, when that multi's reply is lost on
 * the wire (ZooKeeper applied it): the next attempt finds the nodes by their protected names, one per
 * line, and is granted them; an acquisition given up after such a reply leaves no node in any line,
 * while its client, and the session those nodes live on, stay open.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { lockPath, protectedName } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { call, withAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { awaitLater } from '../../support/later.js'
import { startProxy, type Proxy as TcpProxy } from '../../support/proxy.js'
import { waitUntil } from '../../support/wait.js'

describe('zookeeper: an atomic set whose multi lost its reply', { timeout: 90_000 }, () => {
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
  const counts = async (keys: readonly string[]) =>
    Promise.all(keys.map(async (key) => (await children(lockPath(key))).length))

  /**
   * A lock client through `proxy` (its session made, the keys' lock nodes there) whose atomic set's multi
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
})
