import assert from 'node:assert/strict'
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { after, before, describe, it } from 'node:test'
import type { Client, Stat } from 'node-zookeeper-client'
import { zookeeperBackend } from '../../../src/backends/zookeeper/index.js'
import {
  inLine,
  LEASE_NAME,
  protectedId,
  semaphoreLeases,
  semaphorePath,
} from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, LimitMismatchError, type LockClient } from '../../../src/index.js'
import { connectAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { type CuratorBuild, compileCurator, javaCommand, SEMAPHORE_SOURCE } from '../../support/curator.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { pollUntil } from '../../support/wait.js'

/**
 * Counting semaphores on ZooKeeper, what the conformance cases cannot see: the nodes on the store
 * (Curator's `InterProcessSemaphoreV2` layout, the limit in the `leases` node's data), a lease's sequence
 * being its czxid (increasing after the semaphore's nodes were deleted), the nodes gone once unused, a
 * limit stored into a `leases` node Curator made without one, an abandoned waiter's lease deleted, and
 * Curator 5.4's `InterProcessSemaphoreV2` (a Java child: test/fixtures/curator/CuratorSemaphore.java) and
 * fencelock sharing one limit, both ways.
 */
const WITHIN = { withinMs: 30_000, everyMs: 50 }
const PREFIX = '/fencelock-semaphore'

describe('zookeeper: counting semaphore', { timeout: 240_000 }, () => {
  let zk: ZooKeeperEnsemble
  let admin: Client
  let build: CuratorBuild
  const open: LockClient[] = []
  const javas: ChildProcessWithoutNullStreams[] = []

  before(async () => {
    zk = await startZooKeeper(1)
    admin = (await connectAdmin(zk.connectString, { sessionTimeout: 10_000 })) as Client
    build = compileCurator(SEMAPHORE_SOURCE)
  })
  after(async () => {
    for (const java of javas) if (java.exitCode === null && java.signalCode === null) java.kill('SIGKILL')
    build.cleanup()
    await Promise.all(open.map((c) => c.close()))
    admin.close()
    await zk.destroy()
  })

  const clientOn = (url: string, ttl = '10s') => {
    const client = createLockClient(url, { ttl })
    open.push(client)
    return client
  }
  const call = <T>(send: (done: (error: unknown, value: T) => void) => void) =>
    new Promise<T>((resolve, reject) => send((error, value) => (error ? reject(error) : resolve(value))))
  const childrenOf = (path: string) =>
    call<string[]>((done) => admin.getChildren(path, done)).catch(() => [] as string[])
  const dataOf = (path: string) =>
    call<Buffer>((done) => admin.getData(path, (error, data) => done(error, data))).then((b) => b.toString())
  const statOf = (path: string) => call<Stat | null>((done) => admin.exists(path, done))

  it("keeps leases as Curator's InterProcessSemaphoreV2 does, the limit in the leases node", async () => {
    const sems = clientOn(zk.url(PREFIX))
    const name = 'layout/é 🎛'
    const one = await sems.semaphore(name, { limit: 3 }).acquire()
    const two = await sems.semaphore(name, { limit: 3 }).acquire({ permits: 2 })
    const leases = semaphoreLeases(name, PREFIX)
    assert.equal(leases, `${semaphorePath(name, PREFIX)}/leases`)
    assert.match(semaphorePath(name, PREFIX), /^\/fencelock-semaphore\/%semaphore\//)
    assert.equal(await dataOf(leases), 'limit 3')
    const line = inLine(await childrenOf(leases), LEASE_NAME)
    assert.equal(line.length, 2)
    assert.equal(line[0], `_c_${protectedId(one.owner)}-lease-${line[0]!.slice(-10)}`)
    assert.match(line[0]!, /-lease-\d{10}$/)
    assert.equal(line[1], `_c_${protectedId(two.owner)}-2-lease-${line[1]!.slice(-10)}`)
    // The sequence is the lease's czxid: store-wide, not the per-node sequence number.
    const stat = await statOf(`${leases}/${line[1]}`)
    assert.equal(two.sequence, stat!.czxid.readBigInt64BE(0))
    assert.ok(two.sequence > one.sequence)
    assert.match(await dataOf(`${leases}/${line[0]}`), new RegExp(`^${one.owner}\\b`))
    await one.release()
    await two.release()
    assert.deepEqual(await childrenOf(leases), [])
  })

  it('forgets an unused semaphore (its nodes and limit), and its sequence still increases after', async () => {
    const backend = zookeeperBackend({ client: admin, prefix: PREFIX, retireAfter: 0 })
    const sems = createLockClient(backend, { ttl: '10s' })
    open.push(sems)
    const name = 'forgotten'
    const first = await sems.semaphore(name, { limit: 2 }).acquire()
    await first.release()
    const gone = await pollUntil(
      () => statOf(semaphorePath(name, PREFIX)),
      (s) => s === null,
      WITHIN,
    )
    assert.equal(gone, null, 'the semaphore node was deleted once unused')
    assert.equal(await statOf(semaphoreLeases(name, PREFIX)), null)
    // Forgotten, the limit too: another limit is stored by the next acquire.
    const again = await sems.semaphore(name, { limit: 5 }).acquire()
    assert.ok(again.sequence > first.sequence, `sequence ${again.sequence} after ${first.sequence}`)
    assert.equal(await dataOf(semaphoreLeases(name, PREFIX)), 'limit 5')
    await again.release()
  })

  it('stores the limit in a leases node Curator made without one, and refuses another limit after', async () => {
    const name = 'curator-made'
    const leases = semaphoreLeases(name, PREFIX)
    await call((done) => admin.mkdirp(leases, done))
    const sems = clientOn(zk.url(PREFIX))
    const held = await sems.semaphore(name, { limit: 2 }).acquire()
    assert.equal(await dataOf(leases), 'limit 2')
    await assert.rejects(sems.semaphore(name, { limit: 4 }).tryAcquire(), LimitMismatchError)
    await held.release()
  })

  it("deletes an abandoned waiter's lease, and a waiter's lease counts for those behind it", async () => {
    const sems = clientOn(zk.url(PREFIX))
    const name = 'abandoned'
    const leases = semaphoreLeases(name, PREFIX)
    const held = await sems.semaphore(name, { limit: 2 }).acquire()
    const stop = new AbortController()
    const big = awaitLater(sems.semaphore(name, { limit: 2 }).acquire({ permits: 2, signal: stop.signal }))
    const waiting = await pollUntil(
      () => childrenOf(leases),
      (names) => names.length === 2,
      WITHIN,
    )
    assert.equal(waiting.length, 2, 'the holder and the waiter each have a lease')
    // One permit is free, but the waiter for two is ahead: a request for one waits behind it.
    assert.equal(await sems.semaphore(name, { limit: 2 }).tryAcquire(), null)
    stop.abort(new Error('given up'))
    await assert.rejects(big, /given up/)
    const left = await pollUntil(
      () => childrenOf(leases),
      (names) => names.length === 1,
      WITHIN,
    )
    assert.equal(left.length, 1, "the abandoned waiter's lease was deleted")
    const small = await sems.semaphore(name, { limit: 2 }).tryAcquire()
    assert.ok(small, 'the free permit is taken once the waiter ahead has gone')
    await small.release()
    await held.release()
    await sleep(10)
    assert.deepEqual(await childrenOf(leases), [])
  })

  /** A Curator client in a JVM: `send` a command, `next` the next line it prints (in order). */
  const curator = async () => {
    const [java, args] = javaCommand(build, 'CuratorSemaphore', [zk.connectString])
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
    const ready = await Promise.race([next(), sleep(90_000).then(() => `no answer; stderr: ${stderr}`)])
    assert.equal(ready, 'ready', stderr)
    return { send, next, lines, stop: () => child.kill('SIGKILL') }
  }

  it("shares its limit with Curator's InterProcessSemaphoreV2: fencelock holds, Curator waits", async () => {
    const name = 'interop-a'
    const path = semaphorePath(name, PREFIX)
    const leases = semaphoreLeases(name, PREFIX)
    const sems = clientOn(zk.url(PREFIX))
    const one = await sems.semaphore(name, { limit: 2 }).acquire()
    const two = await sems.semaphore(name, { limit: 2 }).acquire()
    const java = await curator()
    java.send(`acquire ${path} 2 60000`)
    const answer = java.next()
    // Both permits are fencelock's: Curator's lease waits (its node is in the line, counted by it).
    await sleep(2000)
    assert.deepEqual(java.lines, [], 'Curator waits while fencelock holds both permits')
    assert.ok((await childrenOf(leases)).length <= 3)
    await one.release()
    assert.equal(await answer, 'acquired')
    assert.equal(
      await sems.semaphore(name, { limit: 2 }).tryAcquire(),
      null,
      'Curator holds the second permit',
    )
    java.send('release')
    assert.equal(await java.next(), 'released')
    const after = await sems.semaphore(name, { limit: 2 }).acquire({ timeout: '60s' })
    await after.release()
    await two.release()
    java.stop()
  })

  it("shares its limit with Curator's InterProcessSemaphoreV2: Curator holds, fencelock waits", async () => {
    const name = 'interop-b'
    const path = semaphorePath(name, PREFIX)
    const leases = semaphoreLeases(name, PREFIX)
    const java = await curator()
    java.send(`acquire ${path} 2 60000`)
    assert.equal(await java.next(), 'acquired')
    java.send(`acquire ${path} 2 60000`)
    assert.equal(await java.next(), 'acquired')
    assert.equal((await childrenOf(leases)).length, 2)
    const sems = clientOn(zk.url(PREFIX))
    assert.equal(await sems.semaphore(name, { limit: 2 }).tryAcquire(), null, "Curator's two leases count")
    const waiting = awaitLater(sems.semaphore(name, { limit: 2 }).acquire({ timeout: '60s' }))
    await sleep(1000)
    const view = await sems.semaphore(name, { limit: 2 }).inspect()
    assert.equal(view.held, 2)
    assert.equal(view.waiting, 1)
    java.send('release')
    assert.equal(await java.next(), 'released')
    const held = await waiting
    assert.equal((await sems.semaphore(name, { limit: 2 }).inspect()).held, 1)
    await held.release()
    java.stop()
  })
})
