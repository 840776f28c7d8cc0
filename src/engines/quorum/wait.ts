/**
 * Waiting for a quorum lock's release (the `waitForChange` hint of the quorum engine, engine.ts). A release
 * is announced by every node it reached, to the first waiter left in that node's line (line.ts)
 * only, on that waiter's client's own channel. A waiter listens to n - q + 1 nodes and wakes at every copy
 * naming it: the first copy makes it re-attempt; one that arrives during or after a failed attempt (the
 * release had not yet reached enough nodes when it asked) means the release has reached one more node,
 * and it asks again. Waiters not named are not woken at all: they keep their place in line.
 */
import { linkedAbort } from '../../core/abort.js'
import type { AcquireRequest } from '../../core/backend.js'

/** A node that announces releases. */
export interface ReleaseListener {
  /** Connected now: a node that is not cannot deliver news, and its wake-ups are none. */
  readonly up: boolean
  /**
   * Resolves with the message that woke it, `req.owner` (first in line on this node now), or `undefined`
   * when no message did (an abort, a subscription just made). Messages naming another waiter do not
   * resolve it.
   */
  listen(req: AcquireRequest, signal: AbortSignal): Promise<string | undefined>
}

/** The reason given to the listens still going once the waiter has woken (a cheap shared value, no stack). */
const WOKEN = Object.freeze({ name: 'Stopped', message: 'stopped by the quorum engine' })

/** FNV-1a: a cheap, stable spread of keys over nodes. */
function hash(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193)
  return h >>> 0
}

export class ReleaseWaiting {
  constructor(
    readonly nodes: readonly ReleaseListener[],
    readonly q: number,
  ) {}

  /**
   * Resolves when a node names `req`'s waiter first in line (it may take the lock now), or when `signal`
   * aborts. A node whose connection is down does not wake its waiter (its listen failed): that is no news,
   * and would make waiting spin; the core's slow poll covers a node that cannot tell.
   */
  waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<undefined> {
    const link = linkedAbort(signal)
    return new Promise<undefined>((resolve) => {
      const done = () => resolve(undefined)
      link.signal.addEventListener('abort', done, { once: true })
      for (const node of this.#listeners(req.key)) {
        node.listen(req, link.signal).then(
          () => {
            if (!link.signal.aborted && node.up) done()
          },
          () => {},
        )
      }
    }).finally(() => {
      link.abort(WOKEN)
      link.dispose()
    })
  }

  /**
   * The nodes a waiter on `key` listens to: n - q + 1 of them, so at least one is up whenever a majority
   * is (a release is announced on every node it reaches); not all n, which would deliver each release n
   * times. Chosen by the key's hash, so the listens of many keys spread over the nodes. With an odd n that
   * is q nodes: once each has named it (the release has reached them all), its attempt finds q free nodes.
   */
  #listeners(key: string): ReleaseListener[] {
    const n = this.nodes.length
    const want = n - this.q + 1
    const start = hash(key) % n
    const ring = [...this.nodes.slice(start), ...this.nodes.slice(0, start)]
    const up = ring.filter((node) => node.up)
    return (up.length >= want ? up : ring).slice(0, want)
  }
}
