/**
 * Settles like `promise`, or rejects with `signal.reason` as soon as `signal` aborts. The operation itself
 * goes on (clients such as ioredis cannot cancel a sent command); callers that may have been granted
 * something by it must clean up themselves. Listens through `attach`: a signal (most are pooled,
 * clock.ts) gets one 'abort' listener for all the races it is ever in, not one added and removed per call.
 */
export function raceSignal<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => {})
    return Promise.reject(signal.reason)
  }
  return new Promise<T>((resolve, reject) => {
    const detach = attach(signal, { abort: reject })
    promise.then(
      (value) => {
        detach()
        resolve(value)
      },
      (error: unknown) => {
        detach()
        reject(error)
      },
    )
  })
}

/** An AbortController tied to parent signals, detachable. */
export interface LinkedAbort {
  readonly signal: AbortSignal
  abort(reason?: unknown): void
  /** Detaches from the parents; call it when done, or the parents keep a listener per link. */
  dispose(): void
}

/**
 * What a parent signal tells when it aborts: an AbortController, or anything else that can stop (a nap,
 * clock.ts, which needs no controller of its own).
 */
export interface Abortable {
  abort(reason?: unknown): void
}

/**
 * Children of each parent signal. A parent gets ONE listener, however many acquires share it (a
 * shutdown signal passed to every call is common): listeners per call would trip Node's leak warning.
 */
const children = new WeakMap<AbortSignal, Set<Abortable>>()

/** Makes `child` abort when `parent` does (at once if it already has); returns the detach. */
export function attach(parent: AbortSignal, child: Abortable): () => void {
  if (parent.aborted) {
    child.abort(parent.reason)
    return () => {}
  }
  let set = children.get(parent)
  if (!set) {
    const created = new Set<Abortable>()
    set = created
    children.set(parent, created)
    parent.addEventListener(
      'abort',
      () => {
        children.delete(parent)
        for (const c of created) c.abort(parent.reason)
      },
      { once: true },
    )
  }
  const own = set
  own.add(child)
  return () => own.delete(child)
}

/**
 * A controller that also aborts when any parent does. Unlike `AbortSignal.any`, which keeps every
 * combined signal referenced from its sources until a garbage collection, `dispose()` leaves nothing
 * behind: the acquire loop makes several per wait, on a client-wide signal that lives for hours.
 */
export function linkedAbort(...parents: Array<AbortSignal | undefined>): LinkedAbort {
  const controller = new AbortController()
  const detach: Array<() => void> = []
  for (const parent of parents) {
    if (!parent) continue
    if (parent.aborted) {
      controller.abort(parent.reason)
      break
    }
    detach.push(attach(parent, controller))
  }
  return {
    signal: controller.signal,
    abort: (reason) => controller.abort(reason),
    dispose() {
      for (const d of detach) d()
      detach.length = 0
    },
  }
}
