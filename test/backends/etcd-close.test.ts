import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import * as etcd3 from 'etcd3'
import { etcdBackend, etcdClientOptions } from '../../src/backends/etcd/index.js'
import { createLockClient, type LockClient } from '../../src/index.js'
import { type EtcdCluster, startEtcd } from '../servers/etcd.js'
import { abortedWithin } from '../support/wait.js'

/**
 * The bound docs/backends/etcd.md gives on `close()` while etcd does not answer (about 10 s: releases within etcd3's 5 s call
 * deadline, the core's 3 s for clean-ups, 2 s for the revokes), with room for a loaded machine. Without
 * a bound, close() waited for as long as the server stayed paused (633 s in a review).
 */
const CLOSE_WITHIN_MS = 20_000

/**
 * How long a process may take to exit on its own once its client is closed and its connection to etcd
 * dropped, with room for a loaded machine. A watcher left to etcd3 kept it alive for as long as anyone
 * waited: etcd3 re-opens the watch stream of a closed client every second, for ever.
 */
const EXIT_WITHIN_MS = 20_000

const BUILD = join(import.meta.dirname, '../..')
const moduleUrl = (path: string) => JSON.stringify(pathToFileURL(join(BUILD, path)).href)

/**
 * A process with a waiter whose wait starts its watches (the stream's and the wait's own) once its
 * connection to etcd (through a proxy of its own) has gone silent, so that they are still being set up
 * when the client closes; then the connection drops. It prints when close() returned and the proxy is
 * gone, and must then exit on its own.
 */
const WAITER_SCRIPT = `
  import { createLockClient } from ${moduleUrl('src/index.js')}
  import { fromUrl } from ${moduleUrl('src/backends/etcd/index.js')}
  import { startProxy } from ${moduleUrl('test/support/proxy.js')}
  const [port, key] = process.argv.slice(1)
  const proxy = await startProxy(Number(port))
  const inner = await fromUrl(new URL('etcd://127.0.0.1:' + proxy.port))
  let waitAsked
  const asked = new Promise((resolve) => { waitAsked = resolve })
  let letWait
  const silent = new Promise((resolve) => { letWait = resolve })
  // The backend's own wait, held back until etcd is out of reach (a backend is spread to wrap a primitive).
  const backend = {
    ...inner,
    waitForChange: async (req, signal) => {
      waitAsked()
      await silent
      return inner.waitForChange(req, signal)
    },
  }
  const locks = createLockClient(backend, { ttl: '30s' })
  const acquire = locks.acquire(key, { timeout: '120s' })
  acquire.catch(() => {})
  await asked
  proxy.mode = 'blackhole'
  letWait()
  // The wait sets up its watches in the turns after the gate opens (it reads nothing first).
  await new Promise((resolve) => setTimeout(resolve, 200))
  await locks.close()
  await proxy.close()
  console.log('closed')
`

/** How long `locks.close()` took, or a failure once it has taken longer than CLOSE_WITHIN_MS. */
async function closeTime(locks: LockClient): Promise<number> {
  const started = performance.now()
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), CLOSE_WITHIN_MS)
  })
  const closed = locks.close().then(() => 'closed' as const)
  closed.catch(() => {})
  const outcome = await Promise.race([closed, late])
  clearTimeout(timer)
  assert.equal(outcome, 'closed', `close() had not returned after ${CLOSE_WITHIN_MS} ms`)
  return performance.now() - started
}

describe('etcd: close() returns while etcd does not answer', { timeout: 180_000 }, () => {
  let cluster: EtcdCluster
  const clients: etcd3.Etcd3[] = []
  before(async () => {
    cluster = await startEtcd(1)
  })
  after(async () => {
    cluster.members[0]!.signal('SIGCONT')
    for (const c of clients) c.close()
    await cluster.destroy()
  })

  /** Pauses the server (SIGSTOP) for `during`, then resumes it. */
  async function paused<T>(during: () => Promise<T>): Promise<T> {
    const member = cluster.members[0]!
    member.signal('SIGSTOP')
    try {
      return await during()
    } finally {
      member.signal('SIGCONT')
    }
  }

  it('after a lock was lost to the pause (the client fromUrl makes)', async (t) => {
    const locks = createLockClient(cluster.url(), { ttl: '2s' })
    const lock = await locks.acquire('close-after-loss')
    await paused(async () => {
      await abortedWithin(lock.signal, 10_000)
      t.diagnostic(`close() took ${Math.round(await closeTime(locks))} ms`)
    })
  })

  it('with a lock held, an acquire waiting and an acquire under way (the client fromUrl makes)', async (t) => {
    const locks = createLockClient(cluster.url(), { ttl: '30s' })
    const held = await locks.acquire('close-while-held')
    const waiting = locks.acquire('close-while-held', { timeout: '60s' })
    waiting.catch(() => {})
    await paused(async () => {
      const pending = locks.acquire('close-while-acquiring', { timeout: '60s' })
      pending.catch(() => {})
      t.diagnostic(`close() took ${Math.round(await closeTime(locks))} ms`)
      assert.ok(held.signal.aborted, 'the holder was told its lock ended with the client')
      await assert.rejects(waiting)
      await assert.rejects(pending)
    })
  })

  it('after a lock was lost to the pause (your own client, built with etcdClientOptions)', async (t) => {
    const client = new etcd3.Etcd3(etcdClientOptions(etcd3, { hosts: cluster.endpoints }))
    clients.push(client)
    const locks = createLockClient(etcdBackend({ client }), { ttl: '2s' })
    const lock = await locks.acquire('close-own-client')
    await paused(async () => {
      await abortedWithin(lock.signal, 10_000)
      t.diagnostic(`close() took ${Math.round(await closeTime(locks))} ms`)
    })
    // Your client stays open and usable once etcd answers again.
    await client.put('after-close').value('1')
  })

  it('a process exits on its own once its client is closed, with watches still being set up', async (t) => {
    const holder = createLockClient(cluster.url(), { ttl: '30s' })
    const key = 'close-exit'
    const lock = await holder.acquire(key)
    const port = String(cluster.members[0]!.clientPort)
    const child = spawn(process.execPath, ['--input-type=module', '-e', WAITER_SCRIPT, port, key], {
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
    const closed = new Promise<number | undefined>((resolve) => {
      child.stdout.on('data', (d) => {
        output += d
        if (output.includes('closed')) resolve(performance.now())
      })
      void exited.then(() => resolve(undefined))
    })
    child.stderr.on('data', (d) => {
      output += d
    })
    let timer: NodeJS.Timeout | undefined
    try {
      const closedAt = await closed
      assert.ok(closedAt !== undefined, `the process ended before its client closed:\n${output}`)
      const late = new Promise<'alive'>((resolve) => {
        timer = setTimeout(() => resolve('alive'), EXIT_WITHIN_MS)
      })
      const outcome = await Promise.race([exited, late])
      assert.notEqual(
        outcome,
        'alive',
        `still running ${EXIT_WITHIN_MS} ms after close() returned:\n${output}`,
      )
      assert.equal(outcome, 0, output)
      t.diagnostic(`exited ${Math.round(performance.now() - closedAt)} ms after close() returned`)
    } finally {
      clearTimeout(timer)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      await lock.release()
      await holder.close()
    }
  })
})
