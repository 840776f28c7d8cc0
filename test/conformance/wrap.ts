/**
 * Fault injection at the backend contract, for the conformance cases: a backend that passes everything
 * through to the real one, except the calls a case replaces (`wrapBackend`) or whose replies it loses
 * (`losingReplies`).
 */
import type { LockBackend } from '../../src/index.js'

type Overrides = Partial<Pick<LockBackend, 'tryAcquire' | 'waitForChange' | 'extend' | 'release'>>

/** A backend that passes everything through to `inner`, except the calls `overrides` replaces. */
export function wrapBackend(inner: LockBackend, overrides: Overrides): LockBackend {
  return {
    id: inner.id,
    capabilities: inner.capabilities,
    ...(inner.limits ? { limits: inner.limits } : {}),
    tryAcquire: (req, signal) => inner.tryAcquire(req, signal),
    waitForChange: async (req, signal) => inner.waitForChange?.(req, signal),
    extend: (lease, ttlMs, signal) => inner.extend(lease, ttlMs, signal),
    release: (lease, signal) => inner.release(lease, signal),
    abandon: (req, signal) => inner.abandon(req, signal),
    inspect: (key, signal) => inner.inspect(key, signal),
    close: () => inner.close(),
    ...overrides,
  }
}

/** A backend whose replies `loseNext` loses, with when each lost call was sent. */
export interface LosingReplies {
  readonly backend: LockBackend
  /**
   * The next `op` is applied by the store, then fails as if its reply had been lost on the way back and
   * the read that would have settled it had failed too: the core sees an unknown outcome of a request
   * that landed.
   */
  loseNext(op: 'extend' | 'release'): void
  /** When (performance.now()) each call whose reply was lost was handed to the real backend. */
  readonly sentAt: number[]
}

export function losingReplies(inner: LockBackend): LosingReplies {
  const armed = new Set<'extend' | 'release'>()
  const sentAt: number[] = []
  const lose = async <T>(op: 'extend' | 'release', call: () => Promise<T>): Promise<T> => {
    if (!armed.delete(op)) return await call()
    sentAt.push(performance.now())
    await call()
    throw Object.assign(new Error(`the reply to this ${op} was lost (injected); the store applied it`), {
      code: 'ETIMEDOUT',
    })
  }
  return {
    backend: wrapBackend(inner, {
      extend: (lease, ttlMs, signal) => lose('extend', () => inner.extend(lease, ttlMs, signal)),
      release: (lease, signal) => lose('release', () => inner.release(lease, signal)),
    }),
    loseNext: (op) => armed.add(op),
    sentAt,
  }
}
