/**
 * `withLock`, `withLeadership` and `withPermits`: run a function while something is held, and give it up
 * afterwards, whatever happened. One place for the rule all three keep: the work's own error wins over a
 * failed release, and work that finished after the hold was lost is reported as the loss, not as success.
 */

/** What is held: its loss signal, and how to give it up. */
export interface Holding {
  /** Aborts with the loss's error when the hold is lost. */
  readonly signal: AbortSignal
}

/**
 * Runs `fn(held)` and then `end()` (release, resign). Rejects with `fn`'s error (after `end`, whose own failure
 * is then dropped), or with the loss when `held.signal` aborted before `fn` returned.
 */
export async function whileHeld<H extends Holding, T>(
  held: H,
  end: () => Promise<void>,
  fn: (held: H) => T | Promise<T>,
): Promise<T> {
  let result: T
  try {
    result = await fn(held)
  } catch (error) {
    // The work's own error matters more than a failed release; the release failure is still published.
    await end().catch(() => {})
    throw error
  }
  if (held.signal.aborted) {
    // fn finished, but not entirely while held: say so rather than report a clean run.
    await end().catch(() => {})
    throw held.signal.reason
  }
  await end()
  return result
}
