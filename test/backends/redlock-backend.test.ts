import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { redisLockKeys } from '../../src/backends/redis/layout.js'
import { redlockBackend } from '../../src/backends/redlock/index.js'
import { redact } from '../../src/core/url.js'
import { createLockClient } from '../../src/index.js'
import { loadBackend, parseBackendUrl } from '../../src/schemes.js'
import { type RedisNodes, startRedisNodes } from '../servers/redis.js'
import { runCli } from '../support/processes.js'
import { startProxy, type Proxy as TcpProxy } from '../support/proxy.js'

describe('redlock: URLs, options and diagnostics', { timeout: 60_000 }, () => {
  let nodes: RedisNodes
  before(async () => {
    nodes = await startRedisNodes(3)
  })
  after(async () => {
    await nodes.destroy()
  })

  it('parses a comma-separated node list and shows all of it (never the password) in messages', () => {
    const url = parseBackendUrl('redlock://user:secret@10.0.0.1:6379,10.0.0.2:6380,[::1]:6381?prefix=app:')
    assert.equal(redact(url), 'redlock://user:***@10.0.0.1:6379,10.0.0.2:6380,[::1]:6381?prefix=app:')
    assert.equal(redact(parseBackendUrl('redlock://a:1,b:2')), 'redlock://a:1,b:2')
    assert.throws(() => parseBackendUrl('redlock://a:1,,b:2'), /Expected a backend URL/)
    assert.throws(() => parseBackendUrl('redlock://a:1,b:99999'), /Expected a backend URL/)
  })

  it('refuses unknown parameters, a database path and a node listed twice', async () => {
    const base = nodes.url()
    await assert.rejects(
      createLockClient(`${base}?nodeTimout=5ms`).tryAcquire('k'),
      /Unknown parameter "nodeTimout"/,
    )
    await assert.rejects(createLockClient(`${base}/2`).tryAcquire('k'), /no path/)
    const port = nodes.servers[0]!.port
    await assert.rejects(
      createLockClient(`redlock://127.0.0.1:${port},127.0.0.1:${port}`).tryAcquire('k'),
      /distinct nodes/,
    )
    await assert.rejects(createLockClient(`${base}?restartDelay=soon`).tryAcquire('k'), /restartDelay/)
  })

  it('warns once per process that a set of 2 nodes has no fault tolerance; 1 and 3 nodes pass quietly', async () => {
    const warnings: Error[] = []
    const onWarning = (warning: Error) => warnings.push(warning)
    process.on('warning', onWarning)
    const made: Redis[] = []
    const backendOf = (n: number) => {
      const clients = nodes.servers
        .slice(0, n)
        .map(
          (s) => new Redis(s.port, '127.0.0.1', { autoResendUnfulfilledCommands: false, lazyConnect: true }),
        )
      made.push(...clients)
      return redlockBackend({ clients })
    }
    try {
      const built = [backendOf(1), backendOf(3), backendOf(2), backendOf(2)]
      // emitWarning delivers on the next tick.
      await new Promise((resolve) => setImmediate(resolve))
      await Promise.all(built.map((b) => b.close()))
    } finally {
      process.off('warning', onWarning)
      for (const c of made) c.disconnect()
    }
    const ours = warnings.filter((w) => (w as { code?: string }).code === 'FENCELOCK_REDLOCK_TWO_NODES')
    assert.equal(ours.length, 1, `warnings: ${warnings.map((w) => w.message).join(' | ')}`)
    assert.equal(ours[0]!.name, 'FencelockWarning')
    assert.match(
      ours[0]!.message,
      /2 nodes has no fault tolerance.*either node down stops every lock.*Use 3 or 5/,
    )
  })

  it('works over your own ioredis clients, which it does not close, and insists they never resend commands', async () => {
    const make = (resend: boolean) =>
      nodes.servers.map((s) => new Redis(s.port, '127.0.0.1', { autoResendUnfulfilledCommands: resend }))
    const risky = make(true)
    try {
      assert.throws(() => redlockBackend({ clients: risky }), /autoResendUnfulfilledCommands: false/)
    } finally {
      for (const c of risky) c.disconnect()
    }
    const mine = make(false)
    try {
      const locks = createLockClient(redlockBackend({ clients: mine, restartDelayMs: 0 }), { ttl: '5s' })
      const lock = await locks.acquire('own-clients')
      assert.ok(lock.fence > 0n)
      await lock.release()
      await locks.close()
      for (const c of mine) assert.equal(await c.ping(), 'PONG', 'a user client was closed by fencelock')
    } finally {
      for (const c of mine) c.disconnect()
    }
    assert.throws(() => redlockBackend({ clients: [] }), /1 to 256 Redis clients/)
  })

  it('inspect: the holder reports its token; another client M, the counter most holding nodes show', async () => {
    // The servers are seconds old: restartDelay=0, so that no node waits to vote (not the point here).
    const holder = createLockClient(nodes.url('?restartDelay=0'), { ttl: '10s' })
    const other = createLockClient(nodes.url('?restartDelay=0'), { ttl: '10s' })
    try {
      // Admitted first (a fresh set is admitted by its first use; one with counters but no admitted
      // node is not fresh and waits).
      await (await holder.acquire('bootstrap')).release()
      // Node 0 ahead of the others (as after attempts that were granted only there and released): whether
      // or not node 0 is in the granting majority, the nodes no longer agree on the counter.
      const first = new Redis(nodes.servers[0]!.port, '127.0.0.1')
      try {
        await first.set(redisLockKeys('out-of-step').fence, '100')
      } finally {
        first.disconnect()
      }
      const lock = await holder.acquire('out-of-step')
      const mine = await holder.inspect('out-of-step')
      assert.equal(mine.owner, lock.owner)
      assert.equal(mine.fence, lock.fence)
      const seen = await other.inspect('out-of-step')
      assert.equal(seen.held, true)
      assert.equal(seen.owner, lock.owner)
      assert.equal(seen.fence! >> 8n, lock.fence >> 8n)
      await lock.release()
      assert.equal((await other.inspect('out-of-step')).held, false)
    } finally {
      await holder.close()
      await other.close()
    }
  })

  it('doctor reports the quorum size, each node and the restart rule', async () => {
    const mine = nodes.servers.map(
      (s) => new Redis(s.port, '127.0.0.1', { autoResendUnfulfilledCommands: false }),
    )
    const backend = redlockBackend({ clients: mine })
    try {
      const findings = await backend.doctor!(AbortSignal.timeout(5000))
      const text = findings.map((f) => `${f.level}: ${f.message}`).join('\n')
      assert.match(text, /3 nodes: a majority is 2, 1 may fail/)
      for (const s of nodes.servers) assert.match(text, new RegExp(`127\\.0\\.0\\.1:${s.port}: Redis`))
      assert.match(text, /restartDelay/)
    } finally {
      await backend.close()
      for (const c of mine) c.disconnect()
    }
  })
})

describe('redlock: doctor over URL clients, on fresh nodes', { timeout: 60_000 }, () => {
  let nodes: RedisNodes
  before(async () => {
    nodes = await startRedisNodes(3)
  })
  after(async () => {
    await nodes.destroy()
  })

  it('names an unreachable node at once; the others, a fresh majority, are admitted without it', async () => {
    // Nothing listens on port 1: the doctor reports the first connection error instead of waiting.
    const url = `redlock://${nodes.servers.map((s) => `127.0.0.1:${s.port}`).join(',')},127.0.0.1:1`
    const backend = await loadBackend(parseBackendUrl(url))
    try {
      const started = performance.now()
      const findings = await backend.doctor!(AbortSignal.timeout(20_000))
      const text = findings.map((f) => `${f.level}: ${f.message}`).join('\n')
      assert.ok(
        performance.now() - started < 15_000,
        `the doctor took ${Math.round(performance.now() - started)} ms`,
      )
      assert.match(text, /error: redis:\/\/127\.0\.0\.1:1: .*ECONNREFUSED/)
      for (const s of nodes.servers) {
        assert.match(text, new RegExp(`ok: redis://127\\.0\\.0\\.1:${s.port}: admitted`))
      }
      assert.match(text, /ok: 3 of 4 nodes admitted: a majority \(3\) can vote/)
    } finally {
      await backend.close()
    }
  })

  it('`fencelock doctor redlock://…` on fresh nodes reports them healthy and admitted (exit 0)', async () => {
    // The URL's clients do not queue commands while they connect (enableOfflineQueue: false): the doctor
    // used to check each node before its connection was up ("Stream isn't writeable…", exit 69).
    const r = await runCli(['doctor', nodes.url()])
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`)
    assert.doesNotMatch(r.stdout, /writeable|^error/m)
    for (const s of nodes.servers) {
      assert.match(r.stdout, new RegExp(`127\\.0\\.0\\.1:${s.port}: Redis \\d`))
      assert.match(r.stdout, new RegExp(`ok +redis://127\\.0\\.0\\.1:${s.port}: admitted`))
    }
    assert.match(r.stdout, /ok +3 of 3 nodes admitted/)
    // restartDelay not given: it is the largest ttl used, not 0.
    assert.match(
      r.stdout,
      /restartDelay is not set, so it is the largest ttl this client has used \(none yet\)/,
    )
    assert.doesNotMatch(r.stdout, /restartDelay is 0/)
  })

  it('says "restartDelay is 0" only when it was set to 0', async () => {
    const backend = await loadBackend(parseBackendUrl(nodes.url('?restartDelay=0')))
    try {
      const text = (await backend.doctor!(AbortSignal.timeout(20_000))).map((f) => f.message).join('\n')
      assert.match(text, /restartDelay is 0: safe only if every node persists each write/)
    } finally {
      await backend.close()
    }
  })
})

describe('redlock: a diagnostic read on fresh connections', { timeout: 60_000 }, () => {
  let nodes: RedisNodes
  let proxies: TcpProxy[] = []
  before(async () => {
    nodes = await startRedisNodes(3)
    proxies = await Promise.all(nodes.servers.map((s) => startProxy(s.port)))
  })
  after(async () => {
    await Promise.all(proxies.map((p) => p.close()))
    await nodes.destroy()
  })

  it('inspect on a new client counts connecting as part of an operator read, not of a vote', async () => {
    // Each node's first exchange (ioredis's ready check) takes 2 × 300 ms, as a cold process on a loaded
    // machine can: well past a vote's nodeTimeout (100 ms by default), well within an operator's read
    // (`fencelock doctor` asks the store with an inspect first, and exited 69 when every node timed out).
    for (const p of proxies) {
      let replied = false
      p.delayMs = 300
      p.filter = (_chunk, direction) => {
        if (replied) p.delayMs = 0
        if (direction === 'reply') replied = true
        return true
      }
    }
    const url = `redlock://${proxies.map((p) => `127.0.0.1:${p.port}`).join(',')}`
    const locks = createLockClient(url, { ttl: '10s' })
    try {
      const info = await locks.inspect('fresh-connections')
      assert.equal(info.held, false)
    } finally {
      await locks.close()
    }
  })
})
