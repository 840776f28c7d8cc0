import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Etcd3, type IKeyValue } from 'etcd3'
import { gatesOf, prefixEnd, rwlockPrefix } from '../../../src/backends/etcd/layout.js'
import { EtcdRwLockQueue } from '../../../src/backends/etcd/rwlock.js'
import { readWriteRule } from '../../../src/engines/queue/grants.js'
import { createLockClient, type Lock, type LockClient } from '../../../src/index.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil } from '../../support/wait.js'

/**
 * Read-write locks on etcd, what the conformance cases cannot see: the keys on the store (Go's
 * `recipe.RWMutex` layout, a writer's gate beside it), fences that are create revisions, a downgrade that
 * deletes the gate and leaves the writer's key untouched (Go's recipe orders by mod revision), Go's
 * recipe's own reads on our keys, and what a waiter waits for.
 */
const WITHIN = { withinMs: 30_000, everyMs: 50 }
const PREFIX = 'fencelock-rw/'

describe('etcd: read-write lock', { timeout: 300_000 }, () => {
  let cluster: EtcdCluster
  let admin: Etcd3
  const open: LockClient[] = []

  before(async () => {
    cluster = await startEtcd(1)
    admin = new Etcd3({ hosts: cluster.endpoints })
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    admin.close()
    await cluster.destroy()
  })

  const clientOn = () => {
    const client = createLockClient(cluster.url(`/${PREFIX}`), { ttl: '20s' })
    open.push(client)
    return client
  }
  /** The keys under `p` by create revision. */
  const keysUnder = async (p: string): Promise<IKeyValue[]> =>
    (
      await admin.kv.range({
        key: Buffer.from(p),
        range_end: prefixEnd(p),
        sort_target: 'Create',
        sort_order: 'Ascend',
      })
    ).kvs
  const waitForLine = (name: string, length: number) =>
    pollUntil(
      () => keysUnder(rwlockPrefix(name, PREFIX)),
      (kvs) => kvs.length === length,
      WITHIN,
    )
  /**
   * Go's `RWMutex.waitOnLastRev(pfx)` read for a key of create revision `rev`: the last key under `pfx` by
   * mod revision with a mod revision below `rev`. A writer asks it of `<lock>/`, a reader of `<lock>/write`.
   */
  const goBlocker = async (pfx: string, rev: string) =>
    (
      await admin.kv.range({
        key: Buffer.from(pfx),
        range_end: prefixEnd(pfx),
        sort_target: 'Mod',
        sort_order: 'Descend',
        max_mod_revision: (BigInt(rev) - 1n).toString(),
        limit: 1,
      })
    ).kvs[0]?.key.toString()

  it("keeps Go's layout; fences are create revisions; a downgrade deletes the gate and admits a waiting reader", async () => {
    const name = 'layout/é'
    const line = rwlockPrefix(name, PREFIX)
    assert.equal(line, `${PREFIX}%rwlock/layout%2Fé/`)
    const [a, b, c] = [clientOn(), clientOn(), clientOn()]
    const r1 = await a.rwlock(name).read()
    const writing = awaitLater(c.rwlock(name).write({ timeout: '60s' }))
    const [first, second] = await waitForLine(name, 2)
    assert.match(first!.key.toString(), new RegExp(`^${line}read/[0-9a-f]+-${r1.owner}$`))
    assert.match(second!.key.toString(), new RegExp(`^${line}write/[0-9a-f]+-`))
    assert.equal(r1.fence, BigInt(first!.create_revision), "a reader's fence is its key's create revision")
    const [gate] = await keysUnder(gatesOf(line, PREFIX))
    assert.equal(gate!.key.toString(), `${gatesOf(line, PREFIX)}${second!.key.toString().split('/').at(-1)}`)
    assert.equal(gate!.create_revision, second!.create_revision, 'the gate is put with the writer key')
    assert.equal(gate!.lease, second!.lease, 'on its lease')
    await r1.release()
    const w = await writing
    assert.equal(w.fence, BigInt(second!.create_revision), "a writer's fence is its key's create revision")

    // A reader waiting behind the writer is admitted by the downgrade, while the writer still holds.
    const reading = awaitLater(b.rwlock(name).read({ timeout: '60s' }))
    await waitForLine(name, 2)
    const downgraded = await w.downgrade()
    const r2 = await reading
    const [held] = await keysUnder(line)
    assert.equal(held!.key.toString(), second!.key.toString(), "the writer's key keeps its name and place")
    assert.equal(held!.mod_revision, second!.mod_revision, "and is not written: Go's recipe orders by it")
    assert.deepEqual(await keysUnder(gatesOf(line, PREFIX)), [], 'its gate is gone')
    assert.equal(downgraded.fence, w.fence)
    assert.ok(r2.fence > w.fence, `the reader after the downgrade ${r2.fence} above ${w.fence}`)
    const view = await a.rwlock(name).inspect()
    assert.deepEqual(
      view.holders.map((h) => [h.mode, h.fence]),
      [
        ['read', w.fence],
        ['read', r2.fence],
      ],
    )
    await downgraded.release()
    await r2.release()
    assert.deepEqual(await keysUnder(line), [])
  })

  it("Go's recipe still waits behind a downgraded writer, a writer queued before the downgrade included", async () => {
    const name = 'go-reads'
    const line = rwlockPrefix(name, PREFIX)
    const w = await clientOn().rwlock(name).write()
    const lease = admin.lease(30, { autoKeepAlive: false })
    try {
      // A Go writer and a Go reader in line behind ours (valueless keys on a session lease, as Go's).
      const goWriter = `${line}write/${Date.now()}000000`
      const goReader = `${line}read/${Date.now()}000001`
      await lease.put(goWriter).value('')
      await lease.put(goReader).value('')
      const [mine, writerKv, readerKv] = await keysUnder(line)
      const downgraded = await w.downgrade()
      // Each asks after the downgrade, as a Go waiter does on its next loop: ours is still before it.
      assert.equal(await goBlocker(line, writerKv!.create_revision), mine!.key.toString())
      assert.equal(await goBlocker(`${line}write`, readerKv!.create_revision), writerKv!.key.toString())
      assert.equal(await goBlocker(`${line}write`, writerKv!.create_revision), mine!.key.toString())
      // A fencelock reader now waits for the Go writer (no gate, no value: always a writer).
      const reader = clientOn().rwlock(name)
      const reading = awaitLater(reader.read({ timeout: '60s' }))
      await waitForLine(name, 4)
      const view = await reader.inspect()
      assert.deepEqual(
        view.holders.map((h) => h.mode),
        ['read'],
        'only the downgraded writer holds: the Go writer waits for it, the Go reader for the Go writer',
      )
      await downgraded.release()
      await admin.delete().key(goWriter).exec()
      const r = await reading
      assert.ok(r.fence > BigInt(writerKv!.create_revision))
      await r.release()
      await admin.delete().key(goReader).exec()
    } finally {
      await lease.revoke()
    }
  })

  it('a reader waits for the newest writer ahead by its gate, a writer for the key just before its own', async () => {
    const name = 'herd'
    const line = rwlockPrefix(name, PREFIX)
    const holder = await clientOn().rwlock(name).write()
    const enter = async (mode: 'read' | 'write', length: number) => {
      const rw = clientOn().rwlock(name)
      const acquire: Promise<Lock> = awaitLater<Lock>(
        mode === 'read' ? rw.read({ timeout: '120s' }) : rw.write({ timeout: '120s' }),
      )
      await waitForLine(name, length)
      // In an object: an async function returning the promise itself would wait for the grant.
      return { acquire }
    }
    const readers = [await enter('read', 2), await enter('read', 3)]
    const writer = await enter('write', 4)
    const late = await enter('read', 5)
    const kvs = await keysUnder(line)
    const queue = new EtcdRwLockQueue(admin, PREFIX)
    try {
      const waitsFor = async (i: number, mode: 'read' | 'write') => {
        const kv = kvs[i]!
        const state = await queue.check(
          { queue: line, name: kv.key.toString(), position: BigInt(kv.create_revision) },
          Number.POSITIVE_INFINITY,
        )
        assert.ok(state !== 'behind' && state.mine)
        const decided = readWriteRule(mode).decide(state.ahead, undefined, state.modes)
        return decided.granted ? 'granted' : decided.waitFor.key.toString()
      }
      const gateOf = (i: number) => queue.gateOf(line, kvs[i]!.key.toString())
      assert.equal(await waitsFor(1, 'read'), gateOf(0), "the first readers wait for the holder's gate")
      assert.equal(await waitsFor(2, 'read'), gateOf(0))
      assert.equal(await waitsFor(3, 'write'), kvs[2]!.key.toString(), 'the writer for the reader before it')
      assert.equal(await waitsFor(4, 'read'), gateOf(3), "the late reader for the queued writer's gate only")
    } finally {
      await queue.close()
    }
    await holder.release()
    const granted = await Promise.all(readers.map((r) => r.acquire))
    for (const r of granted) await r.release()
    const w = await writer.acquire
    assert.ok(granted.every((r) => w.fence > r.fence))
    await w.release()
    await (await late.acquire).release()
  })
})
