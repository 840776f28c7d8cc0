/**
 * The slots semaphore's own behaviour in the core, on the memory backend: what idle waiters cost (counted
 * store calls per listing, the same whatever the limit), two clients racing with different limits never
 * both granted, and the key space it keeps (U+FFFF). Every kit runs the slots conformance cases besides.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { memoryBackend } from '../../src/backends/memory/index.js'
import type { LockBackend } from '../../src/core/backend.js'
import { parseSlotKey, slotKey } from '../../src/core/slots.js'
import { createLockClient, LimitMismatchError } from '../../src/index.js'
import { waitUntil } from '../support/wait.js'
import { uniqueKey } from './fakes.js'

/**
 * A backend whose calls are counted by method; `session` makes it claim session expiry (as etcd and
 * ZooKeeper do), where waiters only list; elsewhere they also try the held slots nearest their end.
 */
function counted(
  backend: LockBackend,
  session: boolean,
): { backend: LockBackend; calls: Map<string, number> } {
  const calls = new Map<string, number>()
  const spy = new Proxy(backend, {
    get(target, name) {
      if (name === 'capabilities' && session) return { ...target.capabilities, expiry: 'session' }
      const value = Reflect.get(target, name, target)
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => {
        calls.set(String(name), (calls.get(String(name)) ?? 0) + 1)
        return value.apply(target, args)
      }
    },
  })
  return { backend: spy, calls }
}

describe('slots semaphore', () => {
  for (const session of [false, true]) {
    it(`idle waiters cost one listing per poll, whatever the limit (${session ? 'session' : 'server'} expiry)`, async () => {
      const perListing: number[] = []
      for (const limit of [2, 64]) {
        const store = uniqueKey()
        const name = uniqueKey()
        const holder = createLockClient(memoryBackend({ name: store }), { ttl: '30s' })
        const { backend, calls } = counted(memoryBackend({ name: store }), session)
        const waiters = createLockClient(backend, { ttl: '30s' })
        const all = await holder.semaphore(name, { limit, layout: 'slots' }).acquire({ permits: limit })
        calls.clear()
        const stop = new AbortController()
        const waiting = [0, 1, 2, 3].map((i) =>
          waiters
            .semaphore(name, { limit, layout: 'slots' })
            .acquire({ permits: 1 + (i % 2), signal: stop.signal })
            .catch((error: unknown) => error),
        )
        await waitUntil(() => (calls.get('list') ?? 0) >= 24, 'the waiters listed 24 times', {
          withinMs: 60_000,
          everyMs: 10,
        })
        stop.abort(new Error('done'))
        for (const outcome of await Promise.all(waiting)) assert.match(String(outcome), /done/)
        const listings = calls.get('list') ?? 0
        const others = [...calls].filter(([method]) => method !== 'list')
        const attempts = calls.get('tryAcquire') ?? 0
        // On a session store nothing but the listing is read; elsewhere at most the permits missing
        // (1 or 2) of the held slots per listing: never one per slot.
        if (session) assert.deepEqual(others, [], `only listings, got ${JSON.stringify(others)}`)
        else
          assert.ok(attempts <= 2 * listings, `${attempts} attempts for ${listings} listings, limit ${limit}`)
        perListing.push(others.reduce((sum, [, n]) => sum + n, 0) / listings)
        await all.release()
        await Promise.all([holder.close(), waiters.close()])
      }
      // Per listing, at most 2 attempts (the permits asked), each a try and its clean-up: a bound that does
      // not depend on the limit.
      for (const [i, limit] of [2, 64].entries())
        assert.ok(perListing[i]! <= 6, `${perListing[i]} calls per listing at limit ${limit}`)
    })
  }

  it('two clients racing with limits 1 and 2 are never both granted', async () => {
    const store = uniqueKey()
    const [a, b] = [0, 1].map(() => createLockClient(memoryBackend({ name: store }), { ttl: '30s' }))
    let refused = 0
    for (let round = 0; round < 30; round++) {
      const name = uniqueKey()
      const outcomes = await Promise.allSettled([
        a!.semaphore(name, { limit: 1, layout: 'slots' }).tryAcquire(),
        b!.semaphore(name, { limit: 2, layout: 'slots' }).tryAcquire(),
      ])
      const granted = outcomes.filter((o) => o.status === 'fulfilled' && o.value !== null)
      for (const o of outcomes) {
        if (o.status === 'rejected') {
          assert.ok(o.reason instanceof LimitMismatchError, String(o.reason))
          refused++
        }
      }
      assert.ok(granted.length <= 1, `round ${round}: both limits granted at once`)
      for (const o of granted)
        await (o as PromiseFulfilledResult<{ release(): Promise<void> }>).value.release()
    }
    assert.ok(refused > 0, 'some rounds raced')
    await Promise.all([a!.close(), b!.close()])
  })

  it('slot keys hold U+FFFF, which no user key may: they never meet', async () => {
    assert.deepEqual(parseSlotKey('render', slotKey('render', 8, 7)), { limit: 8, index: 7 })
    assert.equal(parseSlotKey('render', slotKey('render', 8, 7).replace(/7$/, '8')), undefined)
    assert.equal(parseSlotKey('rend', slotKey('render', 8, 7)), undefined)
    const locks = createLockClient(memoryBackend({ name: uniqueKey() }))
    await assert.rejects(locks.acquire(slotKey('render', 8, 7)), /U\+FFFF, a noncharacter kept/)
    assert.throws(() => locks.semaphore('a\uFFFFb', { limit: 2, layout: 'slots' }), /U\+FFFF/)
    await locks.close()
  })
})
