/**
 * Scripted backends for the core's unit tests: a memory store wrapped so that a test can replace one
 * primitive (an extend that throws, a tryAcquire that hangs, a grant that arrives late) and see every call
 * the core made, in order. The real stores are tested by the conformance suite, not here.
 */
import { randomUUID } from 'node:crypto'
import { setTimeout as delay, setImmediate as turn } from 'node:timers/promises'
import { type MemoryBackend, memoryBackend } from '../../src/backends/memory/index.js'
import type {
  AcquireRequest,
  AttemptResult,
  ExtendResult,
  Grant,
  HeldLease,
  LockBackend,
} from '../../src/index.js'

export { delay }
/** The waits of every test (test/support/wait.ts), under the names these tests use. */
export { abortedAt as aborted, waitUntil as waitFor } from '../support/wait.js'

/** One call the core made, with the monotonic instant it began (and ended, once it settled). */
export interface Call {
  readonly op: 'tryAcquire' | 'extend' | 'release' | 'abandon' | 'close'
  readonly startedAt: number
  endedAt?: number
  readonly req?: AcquireRequest
  readonly lease?: HeldLease
  result?: unknown
  error?: unknown
}

export interface Script {
  tryAcquire?(req: AcquireRequest, signal: AbortSignal, inner: MemoryBackend): Promise<AttemptResult>
  extend?(lease: HeldLease, ttlMs: number, signal: AbortSignal, inner: MemoryBackend): Promise<ExtendResult>
  release?(lease: HeldLease, signal: AbortSignal, inner: MemoryBackend): Promise<boolean>
  // biome-ignore lint/suspicious/noConfusingVoidType: as LockBackend.waitForChange: a plain hint resolves with nothing
  waitForChange?(req: AcquireRequest, signal: AbortSignal): Promise<Grant | undefined | void>
  /** Recorded either way; by default a no-op, as the memory store has nothing to abandon. */
  abandon?(req: AcquireRequest, signal: AbortSignal): Promise<void>
}

export interface ScriptedBackend extends LockBackend {
  readonly inner: MemoryBackend
  readonly calls: Call[]
  /** The calls of one kind, in order. */
  of(op: Call['op']): Call[]
}

/** A fresh memory store of its own, so no two tests share locks. */
export function freshMemory(): MemoryBackend {
  return memoryBackend({ name: randomUUID() })
}

/** Wraps `inner` (a fresh memory store by default), replacing the primitives `script` names and recording all calls. */
export function scripted(script: Script = {}, inner: MemoryBackend = freshMemory()): ScriptedBackend {
  const calls: Call[] = []
  const record = async <T>(call: Call, run: () => Promise<T>): Promise<T> => {
    calls.push(call)
    try {
      const result = await run()
      call.result = result
      return result
    } catch (error) {
      call.error = error
      throw error
    } finally {
      call.endedAt = performance.now()
    }
  }
  const backend: ScriptedBackend = {
    id: `scripted+${inner.id}`,
    capabilities: inner.capabilities,
    inner,
    calls,
    of: (op) => calls.filter((c) => c.op === op),
    tryAcquire: (req, signal) =>
      record({ op: 'tryAcquire', startedAt: performance.now(), req }, () =>
        script.tryAcquire ? script.tryAcquire(req, signal, inner) : inner.tryAcquire(req, signal),
      ),
    extend: (lease, ttlMs, signal) =>
      record({ op: 'extend', startedAt: performance.now(), lease }, () =>
        script.extend ? script.extend(lease, ttlMs, signal, inner) : inner.extend(lease, ttlMs, signal),
      ),
    release: (lease, signal) =>
      record({ op: 'release', startedAt: performance.now(), lease }, () =>
        script.release ? script.release(lease, signal, inner) : inner.release(lease, signal),
      ),
    inspect: (key, signal) => inner.inspect(key, signal),
    waitForChange: (req, signal) =>
      script.waitForChange ? script.waitForChange(req, signal) : inner.waitForChange!(req, signal),
    abandon: (req, signal) =>
      record({ op: 'abandon', startedAt: performance.now(), req }, async () => script.abandon?.(req, signal)),
    close: () => record({ op: 'close', startedAt: performance.now() }, () => inner.close()),
  }
  return backend
}

/** Lets a few macrotask turns pass, so stray promise rejections get reported. */
export async function settle(turns = 5): Promise<void> {
  for (let i = 0; i < turns; i++) {
    await turn()
    await delay(1)
  }
}

/** Records `unhandledRejection` events for the life of the test file. */
export function trackUnhandledRejections(): unknown[] {
  const seen: unknown[] = []
  process.on('unhandledRejection', (reason) => {
    seen.push(reason)
  })
  return seen
}

/** A unique key per test. */
export const uniqueKey = (prefix = 'k'): string => `${prefix}:${randomUUID()}`
