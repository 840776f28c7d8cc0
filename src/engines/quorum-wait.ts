/**
 * Waiting for a quorum lock's release (the `waitForChange` hint of the quorum engine, quorum.ts). A release
 * is announced by every node it reached, naming the first waiter left in that node's line (quorum-line.ts),
 * or "-<owner>" when nobody stands in it. A waiter listens to n - q + 1 nodes. Named, it wakes at every
 * copy: the first re-attempts, and a copy that arrives after a failed attempt (the release had not yet
 * reached enough nodes) means the release has reached one more. An anonymous release wakes at the first
 * copy, and the copies from the other nodes, a moment later, are the same news.
 */
import { linkedAbort } from '../core/abort.js'
import type { AcquireRequest } from '../core/backend.js'
import { BoundedMap } from '../core/bounded-map.js'
import { now } from '../core/clock.js'

/** A node that announces releases. */
export interface ReleaseListener {
  /** Connected now: a node that is not cannot deliver news, and its wake-ups are none. */
  readonly up: boolean
  /**
   * Resolves with the message that woke it: "<waiter>" naming `req.owner` (first in line now), "-<owner>"
   * (a release with nobody in line), `undefined` when no message did. Messages naming another waiter
   * do not wake it.
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
  readonly #heard: RecentReleases

  constructor(
    readonly nodes: readonly ReleaseListener[],
    readonly q: number,
    /** How long copies of one anonymous release count as the same news. */
    windowMs: () => number,
  ) {
    this.#heard = new RecentReleases(windowMs)
  }

  /**
   * Resolves when `req.key` may have been released, or when `signal` aborts. A node whose connection is
   * down wakes its waiter at once (its listen failed): that is no news either, and would make waiting spin.
   */
  waitForChange(req: AcquireRequest, signal: AbortSignal): Promise<undefined> {
    const link = linkedAbort(signal)
    return new Promise<undefined>((resolve) => {
      const done = () => resolve(undefined)
      link.signal.addEventListener('abort', done, { once: true })
      const listen = (node: ReleaseListener) => {
        node.listen(req, link.signal).then(
          (message) => {
            if (link.signal.aborted || !node.up) return
            if (message?.startsWith('-') && this.#heard.repeats(req.key, message)) listen(node)
            else done()
          },
          () => {},
        )
      }
      for (const node of this.#listeners(req.key)) listen(node)
    }).finally(() => {
      link.abort(WOKEN)
      link.dispose()
    })
  }

  /**
   * The nodes a waiter on `key` listens to: n - q + 1 of them, so at least one is up whenever a majority
   * is (a release is announced on every node); not all n, which would deliver each release n times to each
   * waiting client. Chosen by the key's hash, so the listens of many keys spread over the nodes.
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

/**
 * The releases a client's waiters have already reacted to, per key, for a short while: the copies of one
 * release arriving from the other nodes are then recognised as the same news. Bounded: old keys go first.
 */
class RecentReleases {
  readonly #seen = new BoundedMap<string, { message: string; at: number }>(1024)
  constructor(readonly windowMs: () => number) {}

  /** True if `message` on `key` was heard within the window; otherwise records it and returns false. */
  repeats(key: string, message: string): boolean {
    const last = this.#seen.get(key)
    const t = now()
    if (last && last.message === message && t - last.at < this.windowMs()) return true
    this.#seen.renew(key, { message, at: t })
    return false
  }
}
