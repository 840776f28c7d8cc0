/**
 * Resolves when `signal` aborts; rejects after `timeoutMs`. Its timer is ref'd on purpose: fencelock's own
 * renewal and expiry timers are unref'd (they never keep a process alive), so a test that only awaits
 * a lock's signal needs something to keep the event loop running.
 */
export function abortedWithin(signal: AbortSignal, timeoutMs: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return resolve(signal.reason)
    const timer = setTimeout(
      () => reject(new Error(`signal did not abort within ${timeoutMs} ms`)),
      timeoutMs,
    )
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer)
        resolve(signal.reason)
      },
      { once: true },
    )
  })
}
