/**
 * Atomic multi-key acquisition: every key of a set taken in one step of the store (`MultiKeyFacet`), or
 * none. The acquire loop (acquire-loop.ts) runs unchanged over a lease facet that stands for the whole set:
 * its one attempt is the store's atomic step, its wake-up hint is a change of any key, its clean-up the
 * owner-checked clean-up of every key. So the deadline, the backoff of an unreachable store, the validity
 * counted from before an attempt whose outcome is unknown, and the clean-up after it are the loop's own,
 * not a second copy. A grant becomes one ordinary mutex lock per key, each renewed and released on its own.
 */
import { type AcquireContext, acquireLoop } from './acquire-loop.js'
import type { AcquireRequest, Grant, HeldLease, LeaseFacet, LockBackend, MultiKeyFacet } from './backend.js'
import { LockHandle } from './lock.js'
import type { ResolvedAcquireOptions } from './options.js'

/**
 * Acquires every key of `keys` (sorted, de-duplicated) in one atomic step of `ctx.backend`, waiting within
 * `opts.timeoutMs` for a moment when all of them are free: one lock per key, in the order of `keys`.
 */
export function acquireAtomically(
  ctx: AcquireContext,
  facet: MultiKeyFacet,
  keys: readonly string[],
  opts: ResolvedAcquireOptions,
  signal: AbortSignal,
): Promise<LockHandle[]> {
  const backend = ctx.backend as LockBackend
  const whole = { ...ctx, backend: wholeSet(backend, facet, keys) }
  return acquireLoop(whole, keys[0]!, opts, signal, (grant, req, until) =>
    grantsOf(grant).map((each, i) => {
      const lock = new LockHandle(
        ctx,
        { key: keys[i]!, owner: req.owner, fence: each.fence, cookie: each.cookie },
        // Every key valid until the earliest lease's end (the whole grant's `ttlMs` is the shortest).
        {
          ttlMs: Math.max(each.ttlMs, opts.ttlMs),
          validUntil: until,
          ...(each.lost ? { lost: each.lost } : {}),
        },
        opts.renew,
      )
      ctx.held.add(lock)
      return lock
    }),
  )
}

/** The grant of each key, which the whole set's grant carries as its cookie. */
function grantsOf(grant: Grant): readonly Grant[] {
  return grant.cookie as readonly Grant[]
}

/**
 * The lease facet of the whole set, over the mutex of `backend`: only what the acquire loop calls. Its grant
 * has the shortest lease of the keys' and the first key's fence (for diagnostics); the keys' grants ride in
 * its cookie.
 */
function wholeSet(backend: LockBackend, facet: MultiKeyFacet, keys: readonly string[]): LeaseFacet {
  const each = (req: AcquireRequest) => keys.map((key) => ({ ...req, key }))
  const leases = (lease: HeldLease): HeldLease[] =>
    (lease.cookie as readonly Grant[]).map((grant, i) => ({
      key: keys[i]!,
      owner: lease.owner,
      fence: grant.fence,
      cookie: grant.cookie,
    }))
  const waitForKey = backend.waitForChange?.bind(backend)
  const waitForSet = facet.waitForChange?.bind(facet)
  const waitForChange = waitForSet
    ? (req: AcquireRequest, signal: AbortSignal) => waitForSet(each(req), signal)
    : waitForKey &&
      (async (req: AcquireRequest, signal: AbortSignal) => {
        await Promise.race(each(req).map((one) => waitForKey(one, signal)))
      })
  return {
    id: backend.id,
    capabilities: backend.capabilities,
    limits: backend.limits,
    async tryAcquire(req, signal) {
      const result = await facet.tryAcquireAll(each(req), signal)
      if (!result.granted) return result
      const ttlMs = Math.min(...result.grants.map((grant) => grant.ttlMs))
      return { granted: true, fence: result.grants[0]!.fence, ttlMs, cookie: result.grants }
    },
    async release(lease, signal) {
      const released = await Promise.all(leases(lease).map((one) => backend.release(one, signal)))
      return released.every(Boolean)
    },
    async abandon(req, signal) {
      // Owner-checked per key: whatever an attempt with an unknown outcome may have taken, and nothing else.
      await Promise.all(each(req).map((one) => backend.abandon(one, signal)))
    },
    // A change of any key may free the set; no hand-over is taken (the store keeps no line for the set).
    ...(waitForChange ? { waitForChange } : {}),
    inspect: (_key, signal) => backend.inspect(keys[0]!, signal),
    extend() {
      // The loop's grant becomes one lock per key at once: only those are ever extended.
      return Promise.reject(new Error('the lease of a whole set is never extended: each key is'))
    },
  }
}
