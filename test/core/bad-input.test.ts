/**
 * Bad input meets a clear TypeError at the call, before any I/O: never a retry loop, a raw driver error, or
 * a password echoed back.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createLockClient } from '../../src/index.js'
import { freshMemory, scripted, uniqueKey } from './fakes.js'

const typeError = (pattern: RegExp) => (error: unknown) => {
  assert.ok(error instanceof TypeError, `expected a TypeError, got ${error}`)
  assert.match(error.message, pattern)
  return true
}

describe('bad input', () => {
  it('never echoes a password, whatever characters it holds', () => {
    const secrets = ['pa/ss', 'p@ss', 'p:a/s@s', 'se?cret', 'se#cret', 'a/b/c']
    for (const secret of secrets) {
      for (const url of [
        `redis://user:${secret}@127.0.0.1:6379`,
        `redis://:${secret}@127.0.0.1:6379/0`,
        `redlock://user:${secret}@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3`,
        `etcd://user:${secret}@127.0.0.1:2379/app`,
      ]) {
        let message = ''
        try {
          const client = createLockClient(url)
          void client.close()
        } catch (error) {
          message = (error as Error).message
        }
        // Either refused (never quoting the secret) or accepted (then nothing was printed at all).
        assert.ok(!message.includes(secret), `${url} was echoed: ${message}`)
        const parts = secret.split(/[/@:?#]/).filter((p) => p.length >= 3)
        for (const part of parts)
          assert.ok(!message.includes(part), `part "${part}" of ${url} echoed: ${message}`)
      }
    }
  })

  it('refuses malformed percent-escapes at createLockClient', () => {
    for (const url of [
      'memory:%',
      'etcd://127.0.0.1:2379/%',
      'file:///tmp/%zz',
      'redis://us%er:x@127.0.0.1',
    ]) {
      assert.throws(() => createLockClient(url), typeError(/percent-escape/), url)
    }
  })

  it('refuses etcd:// without a host at the first call, not as an outage after dial timeouts', async () => {
    for (const url of ['etcd://', 'etcd:///app']) {
      const client = createLockClient(url)
      await assert.rejects(
        client.acquire(uniqueKey(), { timeout: '30s' }),
        typeError(/at least one host/),
        url,
      )
      await client.close()
    }
  })

  it('refuses memory://name (a host, not a store name) and says what to write', () => {
    assert.throws(() => createLockClient('memory://a'), typeError(/memory:a/))
  })

  it('refuses unknown option names, with a "did you mean"', async () => {
    assert.throws(
      () => createLockClient(freshMemory(), { tiemout: '1s' } as never),
      typeError(/Unknown option `tiemout`.*did you mean `timeout`/),
    )
    const client = createLockClient(freshMemory())
    await assert.rejects(
      client.acquire(uniqueKey(), { ttll: '1s' } as never),
      typeError(/did you mean `ttl`/),
    )
    await assert.rejects(
      client.tryAcquire(uniqueKey(), { singal: undefined } as never),
      typeError(/`signal`/),
    )
    await assert.rejects(client.acquire(uniqueKey(), { zzzzzz: 1 } as never), typeError(/Known options: ttl/))
    await client.close()
  })

  it("refuses keys and ttls beyond the backend's limits before any I/O, naming the limit", async () => {
    const backend = scripted()
    const limited = { ...backend, limits: { maxKeyBytes: 100, maxTtlMs: 60_000 } }
    const client = createLockClient(limited)
    await assert.rejects(client.acquire('k'.repeat(101)), typeError(/at most 100 bytes of UTF-8 on scripted/))
    // Multi-byte characters count as bytes: 34 x 3 = 102 bytes in 34 characters.
    await assert.rejects(client.acquire('€'.repeat(34)), typeError(/got 102 bytes/))
    await assert.rejects(
      client.acquire(uniqueKey(), { ttl: '2m' }),
      typeError(/`ttl` to be at most 60000 ms/),
    )
    const lock = await client.acquire(uniqueKey(), { ttl: '1m' })
    await assert.rejects(lock.extend('61s'), typeError(/at most 60000 ms/))
    await lock.release()
    assert.equal(backend.of('tryAcquire').length, 1, 'only the valid acquire reached the store')
    await client.close()
  })

  it("refuses ttls below the backend's minimum on acquire and extend, naming it and why", async () => {
    const backend = scripted()
    const limited = { ...backend, limits: { maxKeyBytes: 100, maxTtlMs: 60_000, minTtlMs: 3000 } }
    const client = createLockClient(limited)
    const why =
      /`ttl` to be at least 3000 ms on scripted\S* \(the shortest lease its store can keep renewed: .*ttl\/3.*\), got 800 ms/
    await assert.rejects(client.acquire(uniqueKey(), { ttl: '800ms' }), typeError(why))
    await assert.rejects(client.tryAcquire(uniqueKey(), { ttl: 800 }), typeError(why))
    const shortDefault = createLockClient(limited, { ttl: '1.2s' })
    await assert.rejects(shortDefault.acquire(uniqueKey()), typeError(/got 1200 ms/))
    await shortDefault.close()
    const lock = await client.acquire(uniqueKey(), { ttl: '3s' })
    await assert.rejects(lock.extend('2999ms'), typeError(/at least 3000 ms on scripted/))
    await lock.release()
    assert.equal(backend.of('tryAcquire').length, 1, 'only the valid acquire reached the store')
    assert.equal(backend.of('extend').length, 0, 'the short extend never reached the store')
    await client.close()
  })

  it('refuses ill-formed UTF-16 keys (lone surrogates), naming the position, before any I/O', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    // Written as UTF-8 both would be "a\uFFFD": one lock for two keys.
    for (const [key, at] of [
      ['a\uD800', 1],
      ['a\uDC00', 1],
      ['\uDBFFx', 0],
      ['ok-\uD83D\uDE00-\uDE00', 6],
    ] as const) {
      await assert.rejects(
        client.acquire(key),
        typeError(new RegExp(`well-formed UTF-16.*lone surrogate .* at index ${at}`)),
      )
      await assert.rejects(client.tryAcquire(key), typeError(/well-formed UTF-16/))
      await assert.rejects(client.inspect(key), typeError(/well-formed UTF-16/))
    }
    // A surrogate pair is a character like any other.
    const lock = await client.acquire(`emoji-\uD83D\uDE00-${uniqueKey()}`)
    await lock.release()
    assert.equal(backend.of('tryAcquire').length, 1, 'only the well-formed key reached the store')
    await client.close()
  })

  it('refuses a key with NUL where the backend cannot store it, naming the backend', async () => {
    const backend = scripted()
    const client = createLockClient({
      ...backend,
      limits: { maxKeyBytes: 100, maxTtlMs: 60_000, nulInKeys: false },
    })
    await assert.rejects(client.acquire('a\0b'), typeError(/without NUL .* on scripted.*at index 1/))
    await assert.rejects(client.inspect('a\0b'), typeError(/without NUL/))
    assert.equal(backend.of('tryAcquire').length, 0)
    await client.close()
    // Where the store can (the default), NUL is a character like any other.
    const memory = createLockClient(freshMemory())
    const lock = await memory.acquire(`a\0b-${uniqueKey()}`)
    await lock.release()
    await memory.close()
  })

  it('a huge key never makes a huge message', async () => {
    const client = createLockClient(freshMemory())
    const key = 'x'.repeat(1_000_000)
    await assert.rejects(client.acquire(key), (error: unknown) => {
      assert.ok(
        (error as Error).message.length < 500,
        `a ${(error as Error).message.length}-character message`,
      )
      return true
    })
    await client.close()
  })
})
