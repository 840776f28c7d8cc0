import assert from 'node:assert/strict'
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { after, before, describe, it } from 'node:test'
import type { Client, Stat } from 'node-zookeeper-client'
import { fourLetterWord } from '../../../src/backends/zookeeper/four-letter.js'
import { protectedId, rwLine, rwlockPath } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, type Lock, type LockClient, LockNotAcquiredError } from '../../../src/index.js'
import { connectAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { type CuratorBuild, compileCurator, javaCommand, RWLOCK_SOURCE } from '../../support/curator.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil } from '../../support/wait.js'

/**
 * Read-write locks on ZooKeeper, what the conformance cases cannot see: the children on the store (Curator's
 * `InterProcessReadWriteLock` layout; a downgrade keeps the writer's child and marks its data), fences
 * that are the children's czxids, waiters that watch only what they must (a writer the child before its
 * own, a reader the newest writer ahead), a reader behind a writer admitted by the writer's downgrade, and
 * Curator 5.4's `InterProcessReadWriteLock` (a Java child: test/fixtures/curator/CuratorRwLock.java) and
 * fencelock in one line, both ways.
 */
const WITHIN = { withinMs: 30_000, everyMs: 50 }
const PREFIX = '/fencelock-rwlock'

/**
 * The next two lines of the Java program after a release that admits a waiter: the releasing thread's
 * "released" and the waiter's "acquired" come from two threads, in either order (the waiter's watch may
 * fire before the release call returns). Sorted, so a test states both.
 */
async function releasedThenAcquired(java: { next(): Promise<string> }): Promise<string[]> {
  return [await java.next(), await java.next()].sort()
}

describe('zookeeper: read-write lock', { timeout: 300_000 }, () => {
  let zk: ZooKeeperEnsemble
  let admin: Client
  let build: CuratorBuild
  const open: LockClient[] = []
  const javas: ChildProcessWithoutNullStreams[] = []

  before(async () => {
    // Compiled first: javac blocks this process for a while, which an open admin session may not outlive.
    build = compileCurator(RWLOCK_SOURCE)
    zk = await startZooKeeper(1)
    admin = (await connectAdmin(zk.connectString, { sessionTimeout: 10_000 })) as Client
  })
  after(async () => {
    for (const java of javas) if (java.exitCode === null && java.signalCode === null) java.kill('SIGKILL')
    build.cleanup()
    await Promise.all(open.map((c) => c.close()))
    admin.close()
    await zk.destroy()
  })

  /** A client of its own (its own sessions: the server counts watches per session). */
  const clientOn = (ttl = '20s') => {
    const client = createLockClient(zk.url(PREFIX), { ttl })
    open.push(client)
    return client
  }
  /** The admin connection, made again when its session expired (a loaded machine can pause it that long). */
  const live = async () => {
    if (admin.getState().name === 'EXPIRED') {
      admin.close()
      admin = (await connectAdmin(zk.connectString, { sessionTimeout: 10_000 })) as Client
    }
    return admin
  }
  const call = <T>(send: (done: (error: unknown, value: T) => void) => void) =>
    new Promise<T>((resolve, reject) => send((error, value) => (error ? reject(error) : resolve(value))))
  /** The children of `name`'s node in line order. */
  const lineOf = async (name: string) => {
    const client = await live()
    return rwLine(
      await call<string[]>((done) => client.getChildren(rwlockPath(name, PREFIX), done)).catch(() => []),
    )
  }
  const dataOf = async (path: string) => {
    const client = await live()
    return (await call<Buffer>((done) => client.getData(path, (error, data) => done(error, data)))).toString()
  }
  const czxidOf = async (path: string) => {
    const client = await live()
    return (await call<Stat>((done) => client.exists(path, done))).czxid.readBigInt64BE(0)
  }
  const waitForLine = (name: string, length: number) =>
    pollUntil(
      () => lineOf(name),
      (line) => line.length === length,
      WITHIN,
    )
  /** How many sessions watch each path, as the server's `wchp` lists them. */
  const watchers = async () => {
    const member = zk.members[0]!
    const text = await fourLetterWord('127.0.0.1', member.clientPort, 'wchp', AbortSignal.timeout(10_000))
    const byPath = new Map<string, number>()
    let path = ''
    for (const line of text.split('\n')) {
      if (line.startsWith('/')) path = line
      else if (line.startsWith('\t')) byPath.set(path, (byPath.get(path) ?? 0) + 1)
    }
    return byPath
  }

  it("keeps Curator's layout; fences are czxids; a downgrade marks the writer's child and admits a waiting reader", async () => {
    const name = 'layout/é'
    const node = rwlockPath(name, PREFIX)
    assert.match(node, /^\/fencelock-rwlock\/%rwlock\//)
    const [a, b, c] = [clientOn(), clientOn(), clientOn()]
    const r1 = await a.rwlock(name).read()
    const writing = awaitLater(c.rwlock(name).write({ timeout: '60s' }))
    await waitForLine(name, 2)
    const [first, second] = await lineOf(name)
    assert.equal(first, `_c_${protectedId(r1.owner)}-__READ__${first!.slice(-10)}`)
    assert.match(first!, /-__READ__\d{10}$/)
    assert.match(second!, /-__WRIT__\d{10}$/)
    assert.equal(r1.fence, await czxidOf(`${node}/${first}`), "a reader's fence is its child's czxid")
    await r1.release()
    const w = await writing
    assert.equal(w.fence, await czxidOf(`${node}/${second}`), "a writer's fence is its child's czxid")
    assert.ok(w.fence > r1.fence)

    // A reader waiting behind the writer is admitted by the downgrade, while the writer still holds.
    const reading = awaitLater(b.rwlock(name).read({ timeout: '60s' }))
    await waitForLine(name, 2)
    const downgraded = await w.downgrade()
    const r2 = await reading
    const [held] = await lineOf(name)
    assert.equal(held, second, "the downgraded writer's child keeps its name and place")
    assert.match(await dataOf(`${node}/${held}`), /\ndowngraded$/)
    assert.equal(downgraded.fence, w.fence)
    assert.ok(r2.fence > w.fence, `the reader after the downgrade ${r2.fence} above ${w.fence}`)
    await downgraded.release()
    await r2.release()
    assert.deepEqual(await lineOf(name), [])
  })

  it('waiters watch only what they must: a writer the child before its own, a reader the newest writer ahead', async () => {
    const name = 'herd'
    const node = rwlockPath(name, PREFIX)
    const holder = await clientOn().rwlock(name).write()
    const enter = async (mode: 'read' | 'write', length: number) => {
      const rw = clientOn().rwlock(name)
      const acquire: Promise<Lock> = awaitLater<Lock>(
        mode === 'read' ? rw.read({ timeout: '120s' }) : rw.write({ timeout: '120s' }),
      )
      await waitForLine(name, length)
      return { acquire }
    }
    const readers = [await enter('read', 2), await enter('read', 3), await enter('read', 4)]
    const writer = await enter('write', 5)
    const late = await enter('read', 6)
    const line = (await lineOf(name)).map((child) => `${node}/${child}`)
    // Each child is watched by its own session (a holder's watch on its child, set when it was created),
    // and by the waiters that wait for it: the three readers wait for the holder, the writer for the
    // reader just before it, the late reader for that writer only (not for the holder).
    const expected = [4, 1, 1, 2, 2, 1]
    const counts = await pollUntil(
      async () => {
        const byPath = await watchers()
        return line.map((path) => byPath.get(path) ?? 0)
      },
      (found) => found.every((n, i) => n === expected[i]),
      WITHIN,
    )
    assert.deepEqual(counts, expected)
    await holder.release()
    const granted = await Promise.all(readers.map((r) => r.acquire))
    for (const r of granted) await r.release()
    const w = await writer.acquire
    assert.ok(granted.every((r) => w.fence > r.fence))
    await w.release()
    await (await late.acquire).release()
  })

  /** A Curator client in a JVM: `send` a command, `next` the next line it prints (in order). */
  const curator = async () => {
    const [java, args] = javaCommand(build, 'CuratorRwLock', [zk.connectString])
    const child = spawn(java, args, { stdio: 'pipe' })
    javas.push(child)
    const lines: string[] = []
    const waiting: Array<(line: string) => void> = []
    let stderr = ''
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString()
    })
    createInterface({ input: child.stdout }).on('line', (line) => {
      const taker = waiting.shift()
      if (taker) taker(line)
      else lines.push(line)
    })
    const next = () => {
      const line = lines.shift()
      if (line !== undefined) return Promise.resolve(line)
      return new Promise<string>((resolve) => waiting.push(resolve))
    }
    const send = (command: string) => child.stdin.write(`${command}\n`)
    const ready = await next()
    assert.equal(ready, 'ready', stderr)
    return { send, next, stop: () => child.kill('SIGKILL') }
  }

  it("is in one line with Curator's InterProcessReadWriteLock: a Curator writer excludes fencelock, readers share", async () => {
    const name = 'interop-curator-first'
    const path = rwlockPath(name, PREFIX)
    const java = await curator()
    const rw = clientOn().rwlock(name)
    java.send(`write w1 ${path} 60000`)
    assert.equal(await java.next(), 'acquired w1')
    assert.equal(await rw.tryRead(), null, "no fencelock reader while Curator's writer holds")
    assert.equal(await rw.tryWrite(), null, "no fencelock writer while Curator's writer holds")
    const reading = awaitLater(rw.read({ timeout: '60s' }))
    await waitForLine(name, 2)
    java.send('release w1')
    assert.equal(await java.next(), 'released w1')
    const r = await reading
    // Readers of both share; a fencelock writer waits for them.
    java.send(`read r1 ${path} 60000`)
    assert.equal(await java.next(), 'acquired r1')
    const r2 = await rw.tryRead()
    assert.ok(r2, "a fencelock reader shares with Curator's reader")
    assert.equal(await rw.tryWrite(), null, 'no fencelock writer while readers of both hold')
    await r.release()
    await r2.release()
    // A Curator writer queued behind Curator's reader: no fencelock reader passes it.
    java.send(`write w2 ${path} 60000`)
    await waitForLine(name, 2)
    assert.equal(await rw.tryRead(), null, "a fencelock reader passed Curator's queued writer")
    java.send('release r1')
    assert.deepEqual(await releasedThenAcquired(java), ['acquired w2', 'released r1'])
    java.send('release w2')
    assert.equal(await java.next(), 'released w2')
    java.stop()
  })

  it("is in one line with Curator's InterProcessReadWriteLock: a fencelock writer excludes Curator", async () => {
    const name = 'interop-fencelock-first'
    const path = rwlockPath(name, PREFIX)
    const java = await curator()
    const rw = clientOn().rwlock(name)
    const w = await rw.write()
    java.send(`read r1 ${path} 60000`)
    await waitForLine(name, 2)
    java.send(`write w1 ${path} 60000`)
    await waitForLine(name, 3)
    // Downgraded, the writer's child still says __WRIT__: Curator's reader (which reads only names) waits
    // on, while a fencelock reader joins.
    const down = await w.downgrade()
    const joined = await clientOn().rwlock(name).tryRead()
    assert.equal(joined, null, "Curator's reader and writer are queued: a new reader waits behind the writer")
    const view = await rw.inspect()
    assert.deepEqual(
      view.holders.map((h) => h.mode),
      ['read'],
      'only the downgraded writer holds: Curator waits',
    )
    assert.equal(view.waiting, 2)
    await down.release()
    assert.equal(await java.next(), 'acquired r1')
    await assert.rejects(rw.write({ timeout: '1s' }), LockNotAcquiredError)
    java.send('release r1')
    assert.deepEqual(await releasedThenAcquired(java), ['acquired w1', 'released r1'])
    assert.equal(await rw.tryRead(), null, "no fencelock reader while Curator's writer holds")
    java.send('release w1')
    assert.equal(await java.next(), 'released w1')
    const r = await rw.read({ timeout: '60s' })
    await r.release()
    java.stop()
  })
})
