import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { memoryBackend } from '../../src/backends/memory/index.js'
import { type ClientOptions, createLockClient, type LockClient } from '../../src/index.js'
import { freshMemory, scripted, uniqueKey } from './fakes.js'

/** A TypeError whose message matches every pattern. */
const typeError =
  (...patterns: RegExp[]) =>
  (error: unknown): boolean => {
    assert.ok(error instanceof TypeError, `expected a TypeError, got ${error}`)
    for (const pattern of patterns) assert.match(error.message, pattern)
    return true
  }

/** Lets a test pass values the types forbid, as JavaScript callers can. */
const untyped = <T>(value: unknown): T => value as T

describe('client options', () => {
  const bad: [string, ClientOptions, RegExp[]][] = [
    ['a negative ttl', { ttl: -1 }, [/`ttl`/, /-1/]],
    ['a ttl below the minimum', { ttl: 5 }, [/`ttl`/, />= 10 ms/]],
    ['a ttl with an unknown unit', { ttl: '5 days' }, [/`ttl`/, /"5 days"/]],
    ['a negative timeout', { timeout: -5 }, [/`timeout`/, /-5/]],
    ['a driftFactor of 0.5', { driftFactor: 0.5 }, [/`driftFactor`/, /0\.5/, /\[0, 0\.5\)/]],
    ['a negative driftFactor', { driftFactor: -0.1 }, [/`driftFactor`/, /-0\.1/]],
    ['a NaN driftFactor', { driftFactor: Number.NaN }, [/`driftFactor`/, /NaN/]],
    ['a string driftFactor', { driftFactor: untyped('0.1') }, [/`driftFactor`/, /"0\.1" \(string\)/]],
    ['a string renew', { renew: untyped('yes') }, [/`renew`/, /boolean/, /"yes" \(string\)/]],
    ['a numeric renew', { renew: untyped(1) }, [/`renew`/, /`1` \(number\)/]],
  ]
  for (const [what, options, patterns] of bad) {
    it(`rejects ${what} with a TypeError naming the option and the value`, () => {
      assert.throws(() => createLockClient('memory:', options), typeError(...patterns))
      assert.throws(() => createLockClient(freshMemory(), options), typeError(...patterns))
    })
  }

  it('rejects options that are not an object', () => {
    assert.throws(() => createLockClient('memory:', untyped('15s')), typeError(/`options`/, /"15s"/))
  })

  it('accepts every documented form', () => {
    for (const options of [
      {},
      { ttl: 250 },
      { ttl: '15s', timeout: '2m', renew: false, driftFactor: 0 },
      { timeout: Number.POSITIVE_INFINITY },
      { timeout: 0 },
    ]) {
      createLockClient(freshMemory(), options)
    }
  })

  it('uses the client ttl by default and the per-call ttl when given', async () => {
    const backend = scripted()
    const client = createLockClient(backend, { ttl: '2s' })
    const a = await client.acquire(uniqueKey())
    const b = await client.acquire(uniqueKey(), { ttl: 500 })
    assert.deepEqual(
      backend.of('tryAcquire').map((c) => c.req?.ttlMs),
      [2000, 500],
    )
    await a.release()
    await b.release()
  })

  it('uses the client timeout for acquire, but 0 for tryAcquire', async () => {
    const backend = scripted()
    const key = uniqueKey()
    const holder = await createLockClient(backend).acquire(key)
    const client = createLockClient(backend, { timeout: 150 })
    const started = performance.now()
    assert.equal(await client.tryAcquire(key), null)
    await assert.rejects(client.acquire(key), { code: 'FENCELOCK_NOT_ACQUIRED' })
    assert.ok(performance.now() - started >= 150, 'acquire waited for the client timeout')
    await holder.release()
  })
})

describe('backend URLs', () => {
  it('rejects an unknown scheme, listing the supported ones', () => {
    assert.throws(() => createLockClient('foo://x'), typeError(/"foo:"/, /supported: .*memory:/, /file:/))
  })

  it('rejects a malformed URL, showing what it got', () => {
    assert.throws(() => createLockClient('not a url'), typeError(/"not a url"/, /memory:/))
  })

  it('does not print a password from the URL', () => {
    assert.throws(
      () => createLockClient('foo://user:hunter2@host/x'),
      (error: unknown) => error instanceof TypeError && !error.message.includes('hunter2'),
    )
  })

  it('does not print a password from a malformed URL either', () => {
    assert.throws(
      () => createLockClient('postgres://app:hunter2@db host/locks'),
      (error: unknown) => {
        assert.ok(error instanceof TypeError)
        assert.ok(!error.message.includes('hunter2'), error.message)
        return true
      },
    )
  })

  it('rejects a first argument that is neither a URL nor a backend', () => {
    assert.throws(() => createLockClient(untyped({})), TypeError)
    assert.throws(() => createLockClient(untyped(null)), TypeError)
  })

  it('shares a memory:NAME store between clients of the same name', async () => {
    const name = `memory:${uniqueKey('store')}`
    const key = uniqueKey()
    const a = createLockClient(name)
    const b = createLockClient(new URL(name))
    const lock = await a.acquire(key)
    assert.equal(await b.tryAcquire(key), null)
    assert.equal(a.backendId, name)
    await lock.release()
    await a.close()
    await b.close()
  })

  it('knows the id of a backend object from the start', () => {
    const backend = memoryBackend({ name: uniqueKey('store') })
    assert.equal(createLockClient(backend).backendId, backend.id)
  })
})

describe('call options and keys', () => {
  const client: LockClient = createLockClient(freshMemory())

  const badKeys: [string, unknown, RegExp][] = [
    ['an empty key', '', /"" \(string\)/],
    ['a numeric key', 42, /`42` \(number\)/],
    ['an undefined key', undefined, /undefined/],
  ]
  for (const [what, key, received] of badKeys) {
    it(`rejects ${what} in every call, naming \`key\``, async () => {
      const k = untyped<string>(key)
      await assert.rejects(client.acquire(k), typeError(/`key`/, received))
      await assert.rejects(client.tryAcquire(k), typeError(/`key`/, received))
      await assert.rejects(
        client.withLock(k, () => {}),
        typeError(/`key`/, received),
      )
      await assert.rejects(client.inspect(k), typeError(/`key`/, received))
    })
  }

  it('rejects a signal that is not an AbortSignal', async () => {
    await assert.rejects(
      client.acquire(uniqueKey(), { signal: untyped({ aborted: false }) }),
      typeError(/`signal`/, /AbortSignal/, /\[object Object\]/),
    )
  })

  it('rejects bad per-call ttl, timeout and renew', async () => {
    await assert.rejects(client.acquire(uniqueKey(), { ttl: '10x' }), typeError(/`ttl`/, /"10x"/))
    await assert.rejects(client.tryAcquire(uniqueKey(), { timeout: -1 }), typeError(/`timeout`/, /-1/))
    await assert.rejects(client.acquire(uniqueKey(), { renew: untyped('no') }), typeError(/`renew`/, /"no"/))
    await assert.rejects(client.acquire(uniqueKey(), untyped(5)), typeError(/`options`/))
  })

  it('rejects a withLock callback that is not a function', async () => {
    await assert.rejects(client.withLock(uniqueKey(), untyped('fn')), typeError(/`fn`/))
  })

  it('validates before touching the store', async () => {
    const backend = scripted()
    const c = createLockClient(backend)
    await assert.rejects(c.acquire(''), TypeError)
    await assert.rejects(c.acquire(uniqueKey(), { ttl: -1 }), TypeError)
    assert.equal(backend.calls.length, 0)
  })
})
