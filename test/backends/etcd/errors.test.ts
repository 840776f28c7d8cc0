import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { createServer, type Socket } from 'node:net'
import { after, before, describe, it } from 'node:test'
import * as etcd3 from 'etcd3'
import * as etcdModule from '../../../src/backends/etcd/index.js'
import type { LockBackend } from '../../../src/core/backend.js'
import { BackendUnavailableError, createLockClient, type LockClient } from '../../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../../src/schemes.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'
import { freePort } from '../../servers/ports.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'

const owner = () => randomBytes(16).toString('hex')

/** Its message, asserting it stayed one readable line (a key or a driver message can be megabytes). */
function messageOf(error: unknown): string {
  assert.ok(error instanceof BackendUnavailableError, `expected BackendUnavailableError, got ${error}`)
  assert.ok(error.message.length < 600, `a message of ${error.message.length} characters`)
  assert.ok(error.cause !== undefined, 'the driver error is kept as cause')
  return error.message
}

/**
 * One request's own error fails that request only (issue 11.4); the limits the backend declares fit
 * what etcd takes; and an unreachable etcd is said in plain words (11.6).
 */
describe('etcd: request errors, limits and unreachable servers', { timeout: 120_000 }, () => {
  let cluster: EtcdCluster
  const open: LockClient[] = []
  const backends: LockBackend[] = []
  const clients: etcd3.Etcd3[] = []

  before(async () => {
    cluster = await startEtcd(1)
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await Promise.all(backends.map((b) => b.close()))
    for (const c of clients) c.close()
    await cluster.destroy()
  })

  const variants: Record<string, () => Promise<LockBackend>> = {
    'the client fromUrl makes': () => loadBackend(parseBackendUrl(cluster.url())),
    'your own client built with etcdClientOptions': async () => {
      const { etcdBackend, etcdClientOptions } = etcdModule
      assert.equal(typeof etcdClientOptions, 'function', 'fencelock/etcd exports etcdClientOptions')
      const client = new etcd3.Etcd3(etcdClientOptions(etcd3, { hosts: cluster.endpoints }))
      clients.push(client)
      return etcdBackend({ client })
    },
  }

  for (const [variant, make] of Object.entries(variants)) {
    it(`${variant}: a request etcd refuses as too large fails alone; other locks on the client go on`, async () => {
      const backend = await make()
      backends.push(backend)
      const locks = createLockClient(backend, { ttl: '2s' })
      open.push(locks)
      const held = await locks.acquire('held-beside-a-huge-key')
      // Straight to the backend, past the core's key limit: etcd (or gRPC before it) refuses the request.
      // Three in a row: etcd3's default breaker opens after three failures.
      const errors: unknown[] = []
      for (let i = 0; i < 3; i++) {
        const req = { key: 'x'.repeat(700_000), owner: owner(), ttlMs: 2000 }
        const error = await backend.tryAcquire(req, AbortSignal.timeout(10_000)).then(
          () => assert.fail('etcd took a 700 KB key (written 7 times into one transaction)'),
          (e: unknown) => e,
        )
        errors.push(error)
        await backend.abandon(req, AbortSignal.timeout(10_000)).catch(() => {})
      }
      // Unrelated work on the same client, at once.
      const other = await locks
        .acquire('unrelated-after-a-huge-key', { timeout: '2s' })
        .catch((error: unknown) => assert.fail(`an unrelated acquire failed: ${String(error).slice(0, 300)}`))
      await other.release()
      // The held lock lives on through renewals (every ttl/3) for well over its ttl.
      await sleep(5000)
      assert.equal(held.signal.aborted, false, `the held lock was lost: ${held.signal.reason}`)
      assert.ok(held.validUntil > performance.now())
      // Each failure said so in a line, and as final: waiting would not help, so the core gives up at once.
      for (const error of errors) {
        assert.match(messageOf(error), /larger than etcd accepts/)
        assert.equal((error as BackendUnavailableError).retryable, false)
      }
      await held.extend()
      await held.release()
    })
  }

  it('declares limits that etcd takes: the longest key (escaped to three times its length) and ttl', async () => {
    const backend = await loadBackend(parseBackendUrl(cluster.url()))
    backends.push(backend)
    assert.deepEqual(backend.limits, { maxKeyBytes: 32 * 1024, maxTtlMs: 2_147_483_000 })
    const { maxKeyBytes, maxTtlMs } = backend.limits!
    const a = createLockClient(backend, { ttl: '5s' })
    const b = createLockClient(cluster.url(), { ttl: '5s' })
    open.push(a, b)
    // Every character of it is a '/', written '%2F' on etcd: the acquire, the wait in line (its read and
    // its watch) and the hand-over all carry the worst case.
    const key = '/'.repeat(maxKeyBytes)
    const first = await a.acquire(key)
    const second = awaitLater(b.acquire(key, { timeout: '10s' }))
    await sleep(300)
    await first.release()
    const next = await second
    assert.ok(next.fence > first.fence)
    await next.release()
    // etcd3 times keep-alives with setTimeout(ttl × 1000): up to here Node keeps that timer as asked.
    const warnings: Error[] = []
    const onWarning = (w: Error) => warnings.push(w)
    process.on('warning', onWarning)
    try {
      const long = await a.acquire('longest-ttl', { ttl: maxTtlMs })
      await sleep(500)
      await long.release()
    } finally {
      process.off('warning', onWarning)
    }
    assert.deepEqual(
      warnings.filter((w) => w.name === 'TimeoutOverflowWarning').map((w) => w.message),
      [],
    )
  })

  it('says "connection refused at host:port" when nothing listens there', async () => {
    const port = await freePort()
    const locks = createLockClient(`etcd://127.0.0.1:${port}`, { ttl: '2s' })
    open.push(locks)
    const error = await locks.acquire('nobody-home', { timeout: '1s' }).then(
      () => assert.fail('acquired from nowhere'),
      (e: unknown) => e,
    )
    const message = messageOf(error)
    assert.match(message, new RegExp(`connection refused at 127\\.0\\.0\\.1:${port}`))
    assert.doesNotMatch(message, /circuit breaker|Resolution note|UNAVAILABLE/)
  })

  it("says what etcd3's own breaker means with a client left at etcd3's defaults", async () => {
    const port = await freePort()
    const client = new etcd3.Etcd3({ hosts: `http://127.0.0.1:${port}` })
    clients.push(client)
    const backend = etcdModule.etcdBackend({ client })
    backends.push(backend)
    const locks = createLockClient(backend, { ttl: '2s' })
    open.push(locks)
    const error = await locks.acquire('nobody-home', { timeout: '1s' }).then(
      () => assert.fail('acquired from nowhere'),
      (e: unknown) => e,
    )
    const message = messageOf(error)
    assert.match(
      message,
      /connection refused at 127\.0\.0\.1:\d+|circuit breaker is open after repeated failures/,
    )
    assert.doesNotMatch(message, /Execution prevented|Resolution note|UNAVAILABLE/)
  })

  it('says "timed out after N ms" when a server takes the connection but never answers', async () => {
    // A TCP listener that never speaks: a partitioned or paused member looks like this.
    const sockets = new Set<Socket>()
    const silent = createServer((socket) => sockets.add(socket))
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const { port } = silent.address() as { port: number }
    try {
      const backend = await loadBackend(parseBackendUrl(`etcd://127.0.0.1:${port}`))
      backends.push(backend)
      const started = performance.now()
      // Straight to the backend: what it says on its own, without the core's deadlines.
      const attempt = awaitLater(
        backend.tryAcquire({ key: 'silent', owner: owner(), ttlMs: 2000 }, new AbortController().signal),
      )
      let timer: NodeJS.Timeout | undefined
      const bound = new Promise((resolve) => {
        timer = setTimeout(() => resolve('no answer within 20 s'), 20_000)
      })
      const error = await Promise.race([
        attempt.then(
          () => 'acquired',
          (e: unknown) => e,
        ),
        bound,
      ])
      clearTimeout(timer)
      assert.notEqual(error, 'no answer within 20 s', 'a call to a silent server never ends')
      const message = messageOf(error)
      assert.match(message, new RegExp(`timed out after \\d+ ms at 127\\.0\\.0\\.1:${port}`))
      assert.doesNotMatch(message, /DEADLINE_EXCEEDED|LB pick/)
      assert.ok(performance.now() - started < 15_000)
    } finally {
      for (const socket of sockets) socket.destroy()
      silent.close()
    }
  })
})
