import assert from 'node:assert/strict'
import * as diagnosticsChannel from 'node:diagnostics_channel'
import { afterEach, describe, it } from 'node:test'
import {
  BackendUnavailableError,
  channels,
  createLockClient,
  LockLostError,
  LockNotAcquiredError,
} from '../../src/index.js'
import { aborted, delay, freshMemory, scripted, uniqueKey } from './fakes.js'

type Message = Record<string, unknown>

const names = [
  'fencelock:acquire:start',
  'fencelock:acquire:ok',
  'fencelock:acquire:fail',
  'fencelock:extend',
  'fencelock:release',
  'fencelock:lost',
  'fencelock:store:error',
] as const
type Name = (typeof names)[number]

let unsubscribe: (() => void)[] = []

/** Records the messages of every fencelock channel that concern `key`. */
function listen(key: string): Record<Name, Message[]> {
  const seen = Object.fromEntries(names.map((n) => [n, [] as Message[]])) as Record<Name, Message[]>
  for (const name of names) {
    const onMessage = (message: unknown) => {
      if ((message as Message).key === key) seen[name].push(message as Message)
    }
    diagnosticsChannel.subscribe(name, onMessage)
    unsubscribe.push(() => diagnosticsChannel.unsubscribe(name, onMessage))
  }
  return seen
}

afterEach(() => {
  for (const off of unsubscribe) off()
  unsubscribe = []
})

describe('diagnostics_channel', { timeout: 20_000 }, () => {
  it('exports the channels under their documented names', () => {
    assert.deepEqual(
      Object.values(channels)
        .map((c) => c.name)
        .sort(),
      [...names].sort(),
    )
  })

  it('publishes start, ok and release with the key, backend, owner and fence', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    const seen = listen(key)
    const client = createLockClient(backend, { ttl: '5s' })
    const lock = await client.acquire(key, { timeout: '1s' })
    await lock.extend()
    await lock.release()

    assert.deepEqual(seen['fencelock:acquire:start'], [
      { key, backend: backend.id, owner: lock.owner, ttlMs: 5000, timeoutMs: 1000 },
    ])
    const [ok] = seen['fencelock:acquire:ok']
    assert.equal(seen['fencelock:acquire:ok'].length, 1)
    assert.equal(ok?.key, key)
    assert.equal(ok?.backend, backend.id)
    assert.equal(ok?.owner, lock.owner)
    assert.equal(ok?.fence, lock.fence)
    assert.equal(ok?.attempts, 1)
    assert.equal(typeof ok?.waitedMs, 'number')
    assert.ok((ok?.attemptMs as number) >= 0 && (ok?.attemptMs as number) <= (ok?.waitedMs as number))
    assert.deepEqual(seen['fencelock:extend'], [
      { key, backend: backend.id, owner: lock.owner, fence: lock.fence, outcome: 'renewed', grantedMs: 5000 },
    ])
    assert.deepEqual(seen['fencelock:release'], [
      { key, backend: backend.id, owner: lock.owner, fence: lock.fence, released: true },
    ])
    assert.deepEqual(seen['fencelock:lost'], [])
    assert.deepEqual(seen['fencelock:acquire:fail'], [])
  })

  it('publishes lost with the error that aborts lock.signal, and release with released: false after', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    const seen = listen(key)
    const client = createLockClient(backend, { ttl: 150 })
    const lock = await client.acquire(key)
    backend.breakLock(key)
    const { reason } = await aborted(lock.signal)
    await lock.release()

    assert.equal(seen['fencelock:lost'].length, 1)
    const [lost] = seen['fencelock:lost']
    assert.equal(lost?.key, key)
    assert.equal(lost?.backend, backend.id)
    assert.equal(lost?.owner, lock.owner)
    assert.equal(lost?.fence, lock.fence)
    assert.ok(lost?.error instanceof LockLostError)
    assert.equal(lost?.error, reason)
    assert.equal(lost?.reason, 'not_owner')
    assert.ok(seen['fencelock:extend'].some((m) => m.outcome === 'lost'))
    assert.deepEqual(
      seen['fencelock:release'].map((m) => m.released),
      [false],
    )
  })

  it('publishes acquire:fail with the error', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    const client = createLockClient(backend)
    const holder = await client.acquire(key)
    const seen = listen(key)
    await assert.rejects(client.acquire(key, { timeout: 50 }), LockNotAcquiredError)
    const [fail] = seen['fencelock:acquire:fail']
    assert.equal(seen['fencelock:acquire:fail'].length, 1)
    assert.equal(fail?.backend, backend.id)
    assert.ok(fail?.error instanceof LockNotAcquiredError)
    assert.ok((fail?.attempts as number) >= 2)
    assert.equal(typeof fail?.owner, 'string')
    assert.equal(fail?.owner, seen['fencelock:acquire:start'][0]?.owner)
    assert.equal(fail?.aborted, false)
    const stop = new AbortController()
    const gaveUp = client.acquire(key, { signal: stop.signal })
    gaveUp.catch(() => {})
    stop.abort()
    await assert.rejects(gaveUp)
    assert.equal(seen['fencelock:acquire:fail'][1]?.aborted, true)
    await holder.release()
  })

  it('publishes an unknown extend and a failed release with their errors', async () => {
    const backend = scripted({
      extend: async () => {
        throw new Error('ETIMEDOUT')
      },
      release: async () => {
        throw new Error('ECONNRESET')
      },
    })
    const key = uniqueKey()
    const seen = listen(key)
    const client = createLockClient(backend, { renew: false })
    const lock = await client.acquire(key)
    await assert.rejects(lock.extend(), BackendUnavailableError)
    await assert.rejects(lock.release(), BackendUnavailableError)
    const [extend] = seen['fencelock:extend']
    assert.equal(extend?.outcome, 'unknown')
    assert.match(String((extend?.error as Error).message), /ETIMEDOUT/)
    const [release] = seen['fencelock:release']
    assert.equal(release?.released, false)
    assert.match(String((release?.error as Error).message), /ECONNRESET/)
    assert.deepEqual(
      seen['fencelock:store:error'].map((m) => [m.operation, (m.error as Error).message, m.owner]),
      [
        ['extend', 'ETIMEDOUT', lock.owner],
        ['release', 'ECONNRESET', lock.owner],
      ],
    )
  })

  it('publishes store:error for each failed acquire attempt, retried or not', async () => {
    let failures = 2
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        if (failures-- > 0) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })
        return inner.tryAcquire(req, signal)
      },
    })
    const key = uniqueKey()
    const seen = listen(key)
    const client = createLockClient(backend)
    const lock = await client.acquire(key, { timeout: '10s' })
    await lock.release()
    const errors = seen['fencelock:store:error']
    assert.deepEqual(
      errors.map((m) => [m.operation, (m.error as { code?: string }).code, m.backend, m.owner]),
      [
        ['acquire', 'ECONNREFUSED', backend.id, lock.owner],
        ['acquire', 'ECONNREFUSED', backend.id, lock.owner],
      ],
    )
    assert.equal(seen['fencelock:acquire:ok'][0]?.attempts, 3)
  })

  it('says how long a granted acquire waited for the holder (waitedMs - attemptMs)', async () => {
    const backend = freshMemory()
    const key = uniqueKey()
    const client = createLockClient(backend)
    const holder = await client.acquire(key)
    const seen = listen(key)
    const waiter = client.acquire(key, { timeout: '20s' })
    waiter.catch(() => {})
    await delay(300)
    await holder.release()
    const lock = await waiter
    await lock.release()
    const [ok] = seen['fencelock:acquire:ok']
    const waited = (ok?.waitedMs as number) - (ok?.attemptMs as number)
    // The granting round began after the release, at least 300 ms after the waiter started.
    assert.ok(waited >= 250, `waited ${waited} ms (waitedMs ${ok?.waitedMs}, attemptMs ${ok?.attemptMs})`)
    assert.ok((ok?.attemptMs as number) >= 0)
  })

  it('publishes why a lock was lost: its validity passed, its session ended, its client closed', async () => {
    const session = new AbortController()
    const backend = scripted({
      // The first key's extends never answer: its validity passes ('expired').
      extend: (lease, ttlMs, signal, inner) =>
        lease.key.endsWith(':hang') ? new Promise(() => {}) : inner.extend(lease, ttlMs, signal),
      tryAcquire: async (req, signal, inner) => {
        const result = await inner.tryAcquire(req, signal)
        return result.granted && req.key.endsWith(':session') ? { ...result, lost: session.signal } : result
      },
    })
    const base = uniqueKey()
    const reasons: Record<string, unknown> = {}
    const onLost = (message: unknown) => {
      const { key, reason } = message as Message
      if (String(key).startsWith(base)) reasons[String(key).slice(base.length)] = reason
    }
    diagnosticsChannel.subscribe('fencelock:lost', onLost)
    unsubscribe.push(() => diagnosticsChannel.unsubscribe('fencelock:lost', onLost))
    const client = createLockClient(backend, { ttl: 1000 })
    const expiring = await client.acquire(`${base}:hang`)
    const ending = await client.acquire(`${base}:session`)
    await client.acquire(`${base}:closed`)
    session.abort(new Error('session expired'))
    await aborted(expiring.signal, 20_000)
    await aborted(ending.signal)
    await client.close()
    assert.deepEqual(reasons, { ':hang': 'expired', ':session': 'session_ended', ':closed': 'client_closed' })
  })
})
