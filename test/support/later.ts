/**
 * Promises a test starts now and awaits later. Node reports a rejection as unhandled when the promise has
 * no handler by the time it rejects; a test that awaits something else first (a release, a sleep, a
 * server) leaves that window open, and on a loaded machine the rejection lands in it. `awaitLater`
 * attaches a handler the moment the promise is made and returns the same promise: awaiting it later still
 * throws, and `assert.rejects` still sees the error. test/docs/late-handlers.test.ts keeps tests to it.
 */
export function awaitLater<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => {})
  return promise
}
