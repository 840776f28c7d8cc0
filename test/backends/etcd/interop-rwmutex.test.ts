import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { rwlockPrefix } from '../../../src/backends/etcd/layout.js'
import { buildGoRwMutex, type GoRwMutex, startGoRwMutex } from '../../support/go-rwmutex.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil } from '../../support/wait.js'
import { etcdTestCluster, type StoredKey } from './fixture.js'

/**
 * The etcd read-write lock against etcd's own Go `recipe.RWMutex` (etcd 3.4's contrib/recipes, Debian's
 * sources, built once into .cache by test/support/go-rwmutex.ts): one line, both ways. A Go lock says which
 * key it watches when it waits, so "Go waits" is what the recipe did, not a guess from time.
 */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

describe("etcd: read-write lock interop with Go's recipe.RWMutex", { timeout: 300_000 }, () => {
  const goes: GoRwMutex[] = []
  // Registered before the cluster's own, so it runs first: no Go process outlives the cluster.
  after(async () => {
    await Promise.all(goes.map((g) => g.stop()))
  })
  let binary: string
  before(async () => {
    binary = await buildGoRwMutex()
  })
  const etcd = etcdTestCluster()

  /**
   * A Go process taking a `mode` lock on the read-write lock fencelock calls `name`: spelled out as the
   * docs tell a Go user (the default prefix, `%rwlock/`, the name with `/` as `%2F`; Go's `NewRWMutex(s,
   * pfx)` adds the last `/`), not taken from layout.ts, so a change of our layout fails here.
   */
  const goLock = async (mode: 'read' | 'write', name: string) => {
    const pfx = `fencelock/%rwlock/${name.replaceAll('/', '%2F')}`
    const g = await startGoRwMutex(binary, etcd.cluster.endpoints, mode, pfx)
    goes.push(g)
    return g
  }
  const rwOf = (name: string) => etcd.client(etcd.backend(), { ttl: '20s' }).rwlock(name)
  /**
   * The keys of the lock's line, by create revision, once there are `length`. Also what a test waits for
   * after a refused try: its key is removed after the try answered, and a waiter Go or fencelock queues
   * meanwhile would wait for it.
   */
  const line = (name: string, length: number): Promise<StoredKey[]> =>
    pollUntil(
      async () => (await etcd.keysUnder(rwlockPrefix(name))).sort((a, b) => (a.create < b.create ? -1 : 1)),
      (keys) => keys.length === length,
      WITHIN,
    )

  it("a Go writer excludes fencelock's readers and writers; its release wakes them, in line", async () => {
    const name = 'go-writer-first'
    const goWriter = await goLock('write', name)
    await goWriter.acquired
    const { revision } = await goWriter.queued
    const rw = rwOf(name)
    assert.equal(await rw.tryRead(), null, "a fencelock reader while Go's writer holds")
    assert.equal(await rw.tryWrite(), null, "a fencelock writer while Go's writer holds")
    await line(name, 1)
    const reading = awaitLater(rw.read({ timeout: '60s' }))
    await line(name, 2)
    const writing = awaitLater(rwOf(name).write({ timeout: '60s' }))
    await line(name, 3)
    const view = await rw.inspect()
    assert.deepEqual(
      view.holders.map((h) => h.mode),
      ['write'],
      "only Go's writer holds",
    )
    assert.equal(view.waiting, 2)
    await goWriter.release()
    const r = await reading
    assert.ok(r.fence > revision, `the reader's fence ${r.fence} above Go's key ${revision}`)
    assert.equal(await rwOf(name).tryRead(), null, 'a fencelock reader passed the queued fencelock writer')
    await r.release()
    const w = await writing
    assert.ok(w.fence > r.fence)
    await w.release()
  })

  it("a fencelock writer excludes Go's writer and reader; its release wakes them, in line", async () => {
    const name = 'fencelock-writer-first'
    const w = await rwOf(name).write()
    const [ours] = await line(name, 1)
    const goWriter = await goLock('write', name)
    assert.equal(await goWriter.waitedFor(), ours!.key, "Go's writer waits for fencelock's writer")
    const goReader = await goLock('read', name)
    const writerKey = (await goWriter.queued).key
    assert.equal(await goReader.waitedFor(), writerKey, "Go's reader waits for Go's queued writer")
    await w.release()
    await goWriter.acquired
    assert.ok(!goReader.holds(), "Go's reader holds beside Go's writer")
    assert.ok((await goWriter.queued).revision > w.fence)
    await goWriter.release()
    await goReader.acquired

    // And a fencelock writer alone ahead of a Go reader.
    await goReader.release()
    const w2 = await rwOf(name).write()
    const [mine] = await line(name, 1)
    const late = await goLock('read', name)
    assert.equal(await late.waitedFor(), mine!.key, "Go's reader waits for fencelock's writer")
    await w2.release()
    await late.acquired
    assert.ok((await late.queued).revision > w2.fence)
    await late.release()
  })

  it("Go's readers and fencelock's readers share; a writer of either waits for them all", async () => {
    const name = 'readers/share'
    const r1 = await rwOf(name).read()
    const goReader = await goLock('read', name)
    assert.equal(await goReader.waitedFor(), undefined, "Go's reader holds beside fencelock's at once")
    await goReader.acquired
    const r2 = await rwOf(name).tryRead()
    assert.ok(r2, "a fencelock reader shares with Go's reader")
    const view = await rwOf(name).inspect()
    assert.deepEqual(
      view.holders.map((h) => h.mode),
      ['read', 'read', 'read'],
    )
    assert.equal(await rwOf(name).tryWrite(), null, 'a fencelock writer while readers of both hold')
    await line(name, 3)
    const goWriter = await goLock('write', name)
    const last = await line(name, 4)
    assert.equal(await goWriter.waitedFor(), last[2]!.key, "Go's writer waits for the reader just before it")
    await r2.release()
    await r1.release()
    await goReader.release()
    await goWriter.acquired
    await goWriter.release()
  })

  it("a queued Go writer holds back a later fencelock reader (no barging); Go's release admits it", async () => {
    const name = 'go-writer-queued'
    const r = await rwOf(name).read()
    const [held] = await line(name, 1)
    const goWriter = await goLock('write', name)
    assert.equal(await goWriter.waitedFor(), held!.key, "Go's writer waits for fencelock's reader")
    assert.equal(await rwOf(name).tryRead(), null, "a fencelock reader passed Go's queued writer")
    await line(name, 2)
    const reading = awaitLater(rwOf(name).read({ timeout: '60s' }))
    await line(name, 3)
    await r.release()
    await goWriter.acquired
    const view = await rwOf(name).inspect()
    assert.deepEqual(
      view.holders.map((h) => [h.mode, h.owner]),
      [['write', (await goWriter.queued).key]],
      "Go's writer holds alone: the later reader waits",
    )
    await goWriter.release()
    const late = await reading
    assert.ok(late.fence > (await goWriter.queued).revision)
    await late.release()
  })

  it('a queued fencelock writer holds back a later Go reader (no barging); its release admits it', async () => {
    const name = 'fencelock-writer-queued'
    const goReader = await goLock('read', name)
    await goReader.acquired
    const writing = awaitLater(rwOf(name).write({ timeout: '60s' }))
    const [, queued] = await line(name, 2)
    const late = await goLock('read', name)
    assert.equal(await late.waitedFor(), queued!.key, "Go's later reader waits for fencelock's queued writer")
    await goReader.release()
    const w = await writing
    assert.ok(w.fence > (await goReader.queued).revision)
    assert.ok(!late.holds(), "Go's later reader holds beside fencelock's writer")
    await w.release()
    await late.acquired
    assert.ok((await late.queued).revision > w.fence)
    await late.release()
  })

  it("a downgraded fencelock writer still holds back Go's writer, also when Go's writer reads the line again", async () => {
    const name = 'downgraded'
    const w = await rwOf(name).write()
    const [ours] = await line(name, 1)
    const goReader = await goLock('read', name)
    assert.equal(await goReader.waitedFor(), ours!.key, "Go's reader waits for fencelock's writer")
    const goWriter = await goLock('write', name)
    const readerKey = (await goReader.queued).key
    assert.equal(await goWriter.waitedFor(), readerKey, "Go's writer waits for Go's reader just before it")
    const down = await w.downgrade()
    // Go's reader's key goes as its session's end would take it: Go's writer wakes and reads the line
    // again, by mod revision; our downgraded key must still be before its own.
    await etcd.admin.delete().key(readerKey).exec()
    assert.equal(
      await goWriter.waitedFor(2),
      ours!.key,
      "Go's writer, reading again, waits for the downgraded writer",
    )
    assert.equal(await rwOf(name).tryRead(), null, "a fencelock reader passed Go's queued writer")
    await line(name, 2)
    await down.release()
    await goWriter.acquired
    await goWriter.release()
    // Go's reader, its key gone, is not waited for: the recipe never looks at its own key again.
    await goReader.stop()
  })
})
