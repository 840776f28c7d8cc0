import assert from 'node:assert/strict'
import { createServer, type Socket } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { freePort } from '../servers/ports.js'
import { type RedisServer, startRedis } from '../servers/redis.js'
import { runCli } from '../support/processes.js'

describe('fencelock doctor redis://', () => {
  let plain: RedisServer
  let durable: RedisServer
  before(async () => {
    plain = await startRedis({ args: ['--maxmemory-policy', 'allkeys-lru'] })
    durable = await startRedis({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] })
  })
  after(async () => {
    await plain.destroy()
    await durable.destroy()
  })

  it('warns plainly about missing persistence and an evicting memory policy', async () => {
    const r = await runCli(['doctor', plain.url])
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /Redis 7\.|Redis \d/)
    assert.match(r.stdout, /warn +appendonly is off: .*granted twice/)
    assert.match(r.stdout, /warn +maxmemory-policy is allkeys-lru/)
  })

  it('approves AOF with appendfsync always and noeviction', async () => {
    const r = await runCli(['doctor', durable.url])
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /ok +appendonly yes, appendfsync always/)
    assert.match(r.stdout, /ok +maxmemory-policy noeviction/)
    assert.doesNotMatch(r.stdout, /^warn/m)
  })

  it('counts the lock names under the prefix (their fence counters), and --strict fails on warnings', async () => {
    const url = `${durable.url}?prefix=doctor-count*:`
    const none = await runCli(['doctor', url])
    assert.match(none.stdout, /lock names kept: 0 /)
    for (const k of ['a', 'b{c}', 'd']) {
      const ran = await runCli(['run', k, '--url', url, '--', 'true'])
      assert.equal(ran.code, 0, ran.stderr)
    }
    const three = await runCli(['doctor', url])
    assert.match(three.stdout, /lock names kept: 3 \(fence counters under "doctor-count\*:"\)/)
    const plainStrict = await runCli(['doctor', '--strict', plain.url])
    assert.equal(plainStrict.code, 78, plainStrict.stdout)
  })

  it('says unavailable (69) when nothing listens', async () => {
    const r = await runCli(['inspect', 'k', '--url', 'redis://127.0.0.1:1'])
    assert.equal(r.code, 69)
    assert.match(r.stderr, /redis:\/\/127\.0\.0\.1:1/)
  })

  it('reports a store nothing listens on as an error finding with the fix, and exits 69', async () => {
    const r = await runCli(['doctor', 'redis://127.0.0.1:1'])
    assert.equal(r.code, 69)
    assert.match(
      r.stdout,
      /^error +cannot reach the store: .*connection refused at 127\.0\.0\.1:1.*Check that the server runs/m,
    )
  })
})

describe('fencelock run against an unreachable store', () => {
  it('says "store unreachable: connection refused …; retrying", never "waiting for" a holder, and exits 69', async () => {
    const r = await runCli([
      'run',
      'k',
      '--url',
      'redis://127.0.0.1:1',
      '--timeout',
      '3s',
      '-v',
      '--',
      'true',
    ])
    assert.equal(r.code, 69, r.stderr)
    assert.match(r.stderr, /store unreachable: [^\n]*connection refused[^\n]*; retrying k\n/)
    // The reason's own parentheses are not wrapped in more.
    assert.doesNotMatch(r.stderr, /unreachable \(/)
    assert.doesNotMatch(r.stderr, /waiting for k/)
  })
})

describe('fencelock run --timeout 3s against a Redis that cannot serve', () => {
  /** How long `fencelock run` takes against `url`, less the start-up of a CLI process (`--help`). */
  async function timedRun(url: string): Promise<{ code: number; stderr: string; ms: number }> {
    let started = performance.now()
    await runCli(['--help'])
    const startUp = performance.now() - started
    started = performance.now()
    const r = await runCli(['run', 'k', '--url', url, '--timeout', '3s', '--', 'true'])
    return { ...r, ms: performance.now() - started - startUp }
  }

  // The promise: the acquire ends within 3.5 s (docs/api.md), then close() returns and the process exits at
  // once; 1.5 s more for a loaded machine.
  const BOUND_MS = 5000

  it('exits 69 on time when the server is stopped', async () => {
    const r = await timedRun(`redis://127.0.0.1:${await freePort()}`)
    assert.equal(r.code, 69, r.stderr)
    assert.match(r.stderr, /connection refused/)
    assert.ok(r.ms < BOUND_MS, `exited after ${Math.round(r.ms)} ms (beyond its start-up)`)
  })

  it('exits 69 on time when the server accepts connections but never answers', async () => {
    const sockets = new Set<Socket>()
    const silent = createServer((socket) => sockets.add(socket))
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    try {
      const { port } = silent.address() as { port: number }
      const r = await timedRun(`redis://127.0.0.1:${port}`)
      assert.equal(r.code, 69, r.stderr)
      assert.match(r.stderr, /no answer within \d+ ms/)
      assert.ok(r.ms < BOUND_MS, `exited after ${Math.round(r.ms)} ms (beyond its start-up)`)
    } finally {
      for (const socket of sockets) socket.destroy()
      silent.close()
    }
  })
})
