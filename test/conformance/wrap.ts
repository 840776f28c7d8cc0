import type { LockBackend } from '../../src/index.js'

type Overrides = Partial<Pick<LockBackend, 'tryAcquire' | 'waitForChange'>>

/** A backend that passes everything through to `inner`, except the attempts or waits `overrides` replaces. */
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
