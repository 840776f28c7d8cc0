import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import zookeeper from 'node-zookeeper-client'
import { zookeeperBackend } from '../../../src/backends/zookeeper/index.js'
import { inLine, lockPath, protectedName, segment } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient } from '../../../src/index.js'

describe('zookeeper layout', () => {
  it('escapes every key into one path segment ZooKeeper accepts, keeping distinct keys distinct', () => {
    const keys = [
      '',
      '.',
      '..',
      '%',
      '%2E',
      'a/b',
      'a%2Fb',
      'jobs:42',
      'Ünïcödé',
      '🔒',
      '\u0000',
      '\uFFFD',
      '\uD800',
      'A',
      'a',
    ]
    const segments = keys.map(segment)
    assert.equal(new Set(segments).size, keys.length, `collisions: ${segments}`)
    for (const s of segments) {
      assert.ok(s !== '' && s !== '.' && s !== '..' && !s.includes('/'), s)
      for (const ch of s) {
        const code = ch.charCodeAt(0)
        assert.ok(
          code > 0x1f &&
            !(code >= 0x7f && code <= 0x9f) &&
            !(code >= 0xd800 && code <= 0xf8ff) &&
            code < 0xfff0,
          s,
        )
      }
    }
    assert.equal(segment('jobs:42'), 'jobs:42', 'a plain key stays readable')
    assert.equal(lockPath('a/b'), '/fencelock/a%2Fb')
    assert.equal(lockPath('k', '/'), '/k')
  })

  it("names children as Curator's protected mode does and orders them by the sequence after the last `lock-`", () => {
    const owner = '0123456789abcdef0123456789abcdef'
    assert.equal(protectedName(owner), '_c_01234567-89ab-cdef-0123-456789abcdef-lock-')
    assert.match(
      protectedName('not hex'),
      /^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-lock-$/,
    )
    // Curator's and ours interleave by sequence, whatever their ids.
    const line = inLine([
      '_c_ffffffff-0000-0000-0000-000000000000-lock-0000000003',
      '_c_00000000-0000-0000-0000-000000000000-lock-0000000010',
      '_c_99999999-0000-0000-0000-000000000000-lock-0000000001',
    ])
    assert.deepEqual(
      line.map((n) => n.slice(-10)),
      ['0000000001', '0000000003', '0000000010'],
    )
  })
})

describe('zookeeper prefix', () => {
  const refused = (pattern: RegExp) => (error: unknown) => {
    assert.ok(error instanceof TypeError, `expected a TypeError, got ${error}`)
    assert.match(error.message, /ZooKeeper prefix/)
    assert.match(error.message, pattern)
    return true
  }
  const cases: [string, string, RegExp][] = [
    ['//x', '//x', /empty segment/],
    ['/a//b', '/a//b', /empty segment/],
    ['/%00', '/\0', /U\+0000/],
    ['/a/%2E%2E%2Fb', '/a/../b', /"\." or "\.\." segment/],
    ['/zookeeper', '/zookeeper', /reserves/],
    ['/zookeeper/locks', '/zookeeper/locks', /reserves/],
  ]

  it('refuses a URL path ZooKeeper would refuse, at the first call, before any connection', async () => {
    for (const [path, , pattern] of cases) {
      // Port 1: nothing listens there; a refusal after a connection attempt would be an outage, not this.
      const locks = createLockClient(`zookeeper://127.0.0.1:1${path}`)
      await assert.rejects(locks.acquire('k', { timeout: '20s' }), refused(pattern), path)
      await locks.close()
    }
  })

  it('refuses the same prefixes given in code', () => {
    const client = zookeeper.createClient('127.0.0.1:1')
    for (const [, prefix, pattern] of cases) {
      assert.throws(() => zookeeperBackend({ client, prefix }), refused(pattern), prefix)
    }
    for (const prefix of ['/a/./b', '/a/..', '/ok/\uD800']) {
      assert.throws(() => zookeeperBackend({ client, prefix }), refused(/segment|U\+D800/), prefix)
    }
    // What the URL form never produces but a string may: fine when ZooKeeper takes it.
    for (const prefix of ['/fencelock', 'app/locks/', '/', '/zookeeper-locks', '/a.b/..c'])
      assert.doesNotThrow(() => zookeeperBackend({ client, prefix }), prefix)
  })
})
