/**
 * How the CLI's commands hear a lost lock (`onLockLost`, shared by `hold` and `run`): once, even when the
 * process is paused at the worst instant.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { onLockLost } from '../../src/cli/context.js'
import type { Lock } from '../../src/core/lock.js'
import { createLockClient } from '../../src/index.js'
import { freshMemory, uniqueKey } from '../core/fakes.js'
import { waitUntil } from '../support/wait.js'

describe('cli: a lost lock', { timeout: 30_000 }, () => {
  it('is heard when the process pauses past validUntil right after its first read of lock.signal', async () => {
    // SIGSTOP landed just after `hold` printed "acquired" and read the signal once (not aborted yet); on
    // SIGCONT the validity had passed. A second read of lock.signal aborts it there (the lazy expiry),
    // before a listener is added, and the expiry timer is already stopped: nothing would ever tell it.
    const locks = createLockClient(freshMemory(), { ttl: 300, renew: false })
    const lock = await locks.acquire(uniqueKey())
    const signalOf = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(lock), 'signal')!.get!
    let reads = 0
    const paused: Lock = Object.create(lock, {
      signal: {
        get() {
          const signal = signalOf.call(lock) as AbortSignal
          if (reads++ === 0) while (performance.now() <= lock.validUntil) {}
          return signal
        },
      },
    })
    let heard = 0
    onLockLost(paused, () => heard++)
    await waitUntil(() => heard > 0, 'the loss heard', { withinMs: 10_000 })
    assert.equal(heard, 1)
    assert.equal(lock.signal.aborted, true)
    await locks.close()
  })

  it('is heard at once when the lock was lost before, and once when it is lost later', async () => {
    const locks = createLockClient(freshMemory(), { ttl: 300, renew: false })
    const early = await locks.acquire(uniqueKey())
    while (performance.now() <= early.validUntil) {}
    let heardEarly = 0
    onLockLost(early, () => heardEarly++)
    assert.equal(heardEarly, 1, 'at once, without waiting for a timer')
    const later = await locks.acquire(uniqueKey())
    let heardLater = 0
    onLockLost(later, () => heardLater++)
    assert.equal(heardLater, 0)
    await waitUntil(() => heardLater > 0, 'the loss heard', { withinMs: 10_000 })
    assert.equal(heardLater, 1)
    await locks.close()
  })
})
