import { linkedAbort } from './abort.js'

/**
 * Runs `fn` with a signal that aborts after `ms` (reason: "no reply within <ms> ms") or when `parent` does:
 * one step of a longer job, each bounded on its own, the whole job stopped by `parent`.
 */
export async function within<T>(
  ms: number,
  parent: AbortSignal,
  fn: (s: AbortSignal) => Promise<T>,
): Promise<T> {
  const link = linkedAbort(parent)
  const timer = setTimeout(() => link.abort(new Error(`no reply within ${ms} ms`)), ms)
  try {
    return await fn(link.signal)
  } finally {
    clearTimeout(timer)
    link.dispose()
  }
}
