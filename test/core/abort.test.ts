import assert from 'node:assert/strict'
import { getEventListeners } from 'node:events'
import { describe, it } from 'node:test'
import { raceSignal } from '../../src/core/abort.js'
import { giveBack, takeController } from '../../src/core/clock.js'
import { createLockClient } from '../../src/index.js'
import { awaitLater } from '../support/later.js'
import { delay, freshMemory, scripted, uniqueKey, waitFor } from './fakes.js'

describe('abort', { timeout: 20_000 }, () => {
  it('rejects a waiting acquire with exactly signal.reason', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const key = uniqueKey()
    const holder = await client.acquire(key)
    for (const reason of [new Error('shutting down'), 'a string reason', { why: 'an object' }]) {
      const controller = new AbortController()
      const waiting = awaitLater(client.acquire(key, { signal: controller.signal, timeout: '10s' }))
      await delay(30)
      controller.abort(reason)
      await assert.rejects(waiting, (error) => error === reason)
    }
    const timeout = client.acquire(key, { signal: AbortSignal.timeout(50), timeout: '10s' })
    await assert.rejects(timeout, (error) => error instanceof DOMException && error.name === 'TimeoutError')
    assert.equal((await client.inspect(key)).owner, holder.owner)
    await holder.release()
  })

  it('rejects at once for an already-aborted signal, without touching the store', async () => {
    const backend = scripted()
    const client = createLockClient(backend)
    const reason = new Error('already gone')
    const key = uniqueKey()
    await assert.rejects(client.acquire(key, { signal: AbortSignal.abort(reason) }), (e) => e === reason)
    await assert.rejects(client.tryAcquire(key, { signal: AbortSignal.abort(reason) }), (e) => e === reason)
    let ran = false
    await assert.rejects(
      client.withLock(
        key,
        () => {
          ran = true
        },
        { signal: AbortSignal.abort(reason) },
      ),
      (e) => e === reason,
    )
    assert.equal(ran, false)
    assert.equal(backend.of('tryAcquire').length, 0)
    assert.equal((await client.inspect(key)).held, false)
  })

  it('releases a grant that arrives after the abort, and does not leak it', async () => {
    let granted = false
    const backend = scripted({
      tryAcquire: async (req, _signal, inner) => {
        await delay(150) // ignores the signal, like a store whose reply is already on the wire
        granted = true
        return inner.tryAcquire(req, _signal)
      },
    })
    const client = createLockClient(backend)
    const key = uniqueKey()
    const controller = new AbortController()
    const reason = new Error('cancelled')
    const pending = awaitLater(client.acquire(key, { signal: controller.signal }))
    await waitFor(() => backend.of('tryAcquire').length === 1, 'the attempt to start')
    controller.abort(reason)
    await assert.rejects(pending, (e) => e === reason)
    assert.equal(granted, false, 'rejected at the abort, not when the slow attempt settled')

    await waitFor(() => backend.of('release').length === 1, 'the late grant to be released')
    const [attempt] = backend.of('tryAcquire')
    const [release] = backend.of('release')
    assert.equal(release?.lease?.owner, attempt?.req?.owner)
    assert.equal(release?.result, true, 'it released the grant it got')
    assert.equal((await backend.inner.inspect(key, AbortSignal.timeout(1000)))?.held, false)
  })

  it('releases a grant when the signal aborts while the store grants it', async () => {
    for (const when of ['before the grant', 'after the grant'] as const) {
      const controller = new AbortController()
      const reason = new Error(`aborted ${when}`)
      const backend = scripted({
        tryAcquire: async (req, signal, inner) => {
          if (when === 'before the grant') controller.abort(reason)
          const result = await inner.tryAcquire(req, signal)
          if (when === 'after the grant') controller.abort(reason)
          return result
        },
      })
      const client = createLockClient(backend)
      const key = uniqueKey()
      await assert.rejects(client.acquire(key, { signal: controller.signal }), (e) => e === reason)
      await waitFor(() => backend.of('release').length === 1, `a release (${when})`)
      assert.equal(backend.of('release')[0]?.result, true, when)
      assert.equal((await client.inspect(key)).held, false, when)
    }
  })

  it('does not release a held lock when the acquire signal aborts later', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: 300 })
    const key = uniqueKey()
    const controller = new AbortController()
    const lock = await client.acquire(key, { signal: controller.signal })
    controller.abort(new Error('too late to matter'))
    await delay(700)
    assert.equal(lock.signal.aborted, false)
    assert.equal((await client.inspect(key)).owner, lock.owner, 'still held and renewed')
    await lock.release()
  })

  it('stops waiting for the store when the signal aborts a hung attempt', async () => {
    const backend = scripted({
      tryAcquire: () => new Promise(() => {}), // never answers
    })
    const client = createLockClient(backend)
    const reason = new Error('enough')
    const controller = new AbortController()
    const pending = awaitLater(client.tryAcquire(uniqueKey(), { signal: controller.signal }))
    await delay(30)
    controller.abort(reason)
    await assert.rejects(pending, (e) => e === reason)
  })

  it('races many operations on one signal through one listener, each rejected with its reason', async () => {
    const controller = new AbortController()
    const forever = new Promise<never>(() => {})
    const races = Array.from({ length: 5 }, () => awaitLater(raceSignal(forever, controller.signal)))
    // One listener however many races: adding and removing one per call was a large share of a cycle.
    assert.equal(getEventListeners(controller.signal, 'abort').length, 1)
    const settled = await raceSignal(Promise.resolve('answered'), controller.signal)
    assert.equal(settled, 'answered')
    const reason = new Error('stop')
    controller.abort(reason)
    for (const race of races) await assert.rejects(race, (e) => e === reason)
  })

  it('keeps as many spare controllers as a busy client has operations under way', () => {
    const taken = Array.from({ length: 600 }, () => takeController())
    for (const c of taken) giveBack(c)
    const again = new Set(Array.from({ length: 600 }, () => takeController()))
    assert.equal(taken.filter((c) => again.has(c)).length, 600)
    for (const c of again) giveBack(c)
  })
})
