import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { OWNER_CHECKED_RESUME } from '../../src/core/resume.js'
import { CapabilityError, createLockClient, type LockBackend, LockLostError } from '../../src/index.js'
import { delay, freshMemory, uniqueKey } from './fakes.js'

/** A memory store that lets its leases be resumed, as the stores whose leases outlive a process do. */
const resumable = (): LockBackend => ({ ...freshMemory(), resume: OWNER_CHECKED_RESUME })

const tokenBody = (token: string): Record<string, unknown> =>
  JSON.parse(Buffer.from(token.slice('fencelock1.'.length), 'base64url').toString('utf8'))

describe('lock.token() and locks.resume(token)', { timeout: 30_000 }, () => {
  it('refuses on a store whose leases die with their holder, naming it', async () => {
    const client = createLockClient(freshMemory())
    const lock = await client.acquire(uniqueKey())
    assert.throws(
      () => lock.token(),
      (error: unknown) =>
        error instanceof CapabilityError &&
        error.message.includes(client.backendId!) &&
        /cannot hand a lease to another process/.test(error.message),
    )
    await lock.release()
    await client.close()
  })

  it('refuses the leases of elections, semaphores and read-write locks, even where locks resume', async () => {
    const client = createLockClient(resumable())
    const key = uniqueKey()
    const leader = await client.election(key).campaign({ timeout: '5s' })
    const permits = await client.semaphore(key, { limit: 2 }).acquire({ timeout: '5s' })
    const reader = await client.rwlock(key).read({ timeout: '5s' })
    assert.throws(
      () => reader.token(),
      (error: unknown) =>
        error instanceof CapabilityError && /only a lock's lease can be resumed/.test(error.message),
    )
    assert.equal('token' in leader, false, 'a leadership has no token()')
    assert.equal('token' in permits, false, 'permits have no token()')
    await Promise.all([leader.resign(), permits.release(), reader.release()])
    await client.close()
  })

  it('a token names the store, key, owner, fence and ttl, and nothing else', async () => {
    const client = createLockClient(resumable(), { ttl: '7s' })
    const lock = await client.acquire(uniqueKey())
    const body = tokenBody(lock.token())
    assert.deepEqual(body, {
      backend: client.backendId,
      key: lock.key,
      owner: lock.owner,
      fence: String(lock.fence),
      ttlMs: 7000,
    })
    await lock.release()
    await client.close()
  })

  it('closing the client of a lock whose token was made stops that handle and leaves the lease to the token', async () => {
    const backend = resumable()
    const key = uniqueKey()
    const first = createLockClient(backend, { ttl: 200 })
    const original = await first.acquire(key)
    const second = createLockClient(backend, { ttl: 200 })
    const resumed = await second.resume(original.token())
    await first.close()
    assert.ok(original.signal.reason instanceof LockLostError, `${original.signal.reason}`)
    await delay(800)
    assert.equal(resumed.signal.aborted, false, `lost: ${resumed.signal.reason}`)
    assert.equal((await second.inspect(key)).owner, original.owner)
    await resumed.release()
    assert.equal((await second.inspect(key)).held, false)
    await second.close()
  })

  it('a shared handle that expires here does not release the lease the resumed one renews', async () => {
    const backend = resumable()
    const key = uniqueKey()
    const client = createLockClient(backend, { ttl: 200 })
    const original = await client.acquire(key, { renew: false })
    const resumed = await client.resume(original.token())
    await delay(800)
    assert.ok(original.signal.aborted, 'the original expired here')
    assert.equal(resumed.signal.aborted, false, `lost: ${resumed.signal.reason}`)
    await resumed.release()
    await client.close()
  })
})
