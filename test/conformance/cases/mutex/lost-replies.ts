/**
 * Lost replies on extend and release: the store applies the request, its reply never arrives (nor does the
 * read that would settle it), so the core sees an unknown outcome of a request that landed. The holder
 * must never believe it holds longer than the store keeps, and no waiter may be granted while the holder
 * still does (its validUntil in the future). The rule is the core's; these cases hold every backend to it.
 */
import assert from 'node:assert/strict'
import { BackendUnavailableError, type Lock, type LockClient, LockLostError } from '../../../../src/index.js'
import { abortedWithin } from '../../../support/wait.js'
import type { CaseContext, ConformanceCase } from '../../harness.js'
import { type LosingReplies, losingReplies } from '../../wrap.js'

/** A holder over a backend that loses the replies it is told to, and a waiter over the plain store. */
async function holderAndWaiter(ctx: CaseContext, ttl: number) {
  const faults = losingReplies(await ctx.backend())
  const holder = ctx.client({ ttl }, faults.backend)
  return { faults, holder, waiter: ctx.client() }
}

/** What the store says of `key` bounds the holder's validity: it never ends after the store's lease. */
async function assertStoreKeepsAtLeast(waiter: LockClient, key: string, lock: Lock): Promise<void> {
  const info = await waiter.inspect(key)
  const readAt = performance.now()
  if (!info.held) {
    assert.ok(
      lock.validUntil <= readAt,
      `the store has freed it, the holder counts on it until +${lock.validUntil - readAt} ms`,
    )
    return
  }
  if (info.expiresInMs === undefined) return
  // The store's lease ends at the latest `expiresInMs` after our read's reply (+1 ms of rounding).
  assert.ok(
    lock.validUntil <= readAt + info.expiresInMs + 1,
    `the holder counts on ${Math.round(lock.validUntil - readAt)} ms, the store keeps ${info.expiresInMs} ms`,
  )
}

/**
 * The waiter is granted (the lock frees by the store's lease or the holder's local expiry), and not while
 * the holder still counts on it.
 */
async function assertGrantedOnlyAfter(waiter: LockClient, key: string, lock: Lock, timeoutMs: number) {
  const next = await waiter.acquire(key, { timeout: timeoutMs })
  const grantedAt = performance.now()
  assert.ok(
    lock.validUntil <= grantedAt,
    `a waiter was granted ${Math.round(lock.validUntil - grantedAt)} ms before the holder's validity ended`,
  )
  assert.ok(next.fence > lock.fence)
  await next.release()
}

/** The unknown extend: an unknown outcome, or a loss when the validity it leaves is over already. */
async function extendLosingReply(faults: LosingReplies, lock: Lock, ttl: number): Promise<number> {
  faults.loseNext('extend')
  const error = await lock.extend(ttl).then(
    () => assert.fail('an extend whose reply was lost must not succeed'),
    (e: unknown) => e,
  )
  assert.ok(error instanceof BackendUnavailableError || error instanceof LockLostError, `got ${error}`)
  assert.equal(faults.sentAt.length, 1, 'the injected fault fired')
  return faults.sentAt[0]!
}

export const lostReplyCases: ConformanceCase[] = [
  {
    name: 'a lost reply on an extend to a shorter ttl: the holder counts only the shorter lease',
    async run(ctx) {
      const key = ctx.key('lost-extend-shorter')
      const [short, long] = [ctx.ttl(4), ctx.ttl(20)]
      const { faults, holder, waiter } = await holderAndWaiter(ctx, long)
      const lock = await holder.acquire(key, { renew: false })
      const sentAt = await extendLosingReply(faults, lock, short)
      // The core's own start precedes the call the wrapper timed.
      assert.ok(
        lock.validUntil <= sentAt + short,
        `validUntil ${Math.round(lock.validUntil - sentAt)} ms after an extend of ${short} ms was sent`,
      )
      await assertStoreKeepsAtLeast(waiter, key, lock)
      await assertGrantedOnlyAfter(waiter, key, lock, long + 30_000)
      await abortedWithin(lock.signal, 30_000)
      await lock.release()
    },
  },

  {
    name: 'a lost reply on an extend to a longer ttl: the holder keeps the validity it had',
    async run(ctx) {
      const key = ctx.key('lost-extend-longer')
      const [short, long] = [ctx.ttl(4), ctx.ttl(20)]
      const { faults, holder, waiter } = await holderAndWaiter(ctx, short)
      const lock = await holder.acquire(key, { renew: false })
      const before = lock.validUntil
      await extendLosingReply(faults, lock, long)
      assert.ok(lock.validUntil <= before, 'an unknown extend never lengthens the validity')
      await assertStoreKeepsAtLeast(waiter, key, lock)
      // Lost locally at the old validity (its release then frees the store's longer lease), or by the store.
      await assertGrantedOnlyAfter(waiter, key, lock, long + 30_000)
      assert.ok((await abortedWithin(lock.signal, 30_000)) instanceof LockLostError)
      await lock.release()
    },
  },

  {
    name: 'a lost reply on release: the holder counts on nothing once it is sent, and the lock is free',
    async run(ctx) {
      const key = ctx.key('lost-release')
      const long = ctx.ttl(20)
      const { faults, holder, waiter } = await holderAndWaiter(ctx, long)
      const lock = await holder.acquire(key)
      faults.loseNext('release')
      await assert.rejects(lock.release(), BackendUnavailableError)
      assert.equal(faults.sentAt.length, 1, 'the injected fault fired')
      assert.ok(lock.validUntil <= faults.sentAt[0]!, 'nothing counted on after the release was sent')
      await assertStoreKeepsAtLeast(waiter, key, lock)
      // Applied by the store: the waiter does not sit out the lease the holder had.
      await assertGrantedOnlyAfter(waiter, key, lock, long)
    },
  },
]
