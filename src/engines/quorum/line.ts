/**
 * The waiting line of a quorum lock (engine.ts): who may take the nodes of a released lock. Without it,
 * every waiter that hears a release tries every node at once, the contenders split the nodes between them,
 * nobody reaches a majority, all release and retry, and the one that was not waiting at all (the worker
 * that just released and asks again) usually wins: throughput collapsed and a waiter could starve (with 2 of
 * 5 nodes down, a 20 s timeout ran out).
 *
 * What it decides:
 * - Each node keeps a line of waiters, ordered by (ticket, waiter id), and grants a free lock only to the
 *   first live waiter of its line (or to anyone while its line is empty). A refused attempt puts its waiter
 *   in the line, or refreshes its place there; a waiter that stops asking drops out after `livenessMs`.
 * - The ticket is one number for all nodes, drawn like Lamport's bakery: the first refused attempt asks each
 *   node to put the waiter behind everyone in its line (the node answers with that place), and once q nodes
 *   have answered, the ticket is the largest of those places. Every later attempt of the acquire puts it at
 *   that ticket on every node it reaches. Any waiter already in line on a majority when ours draws is on one
 *   of the q nodes that answered, so ours comes after it: a waiter is overtaken only by waiters that drew
 *   at the same time (ties go by waiter id, which every node orders alike).
 * - So the nodes never disagree on the order of two waiters that both stand in their lines, only on who
 *   stands there (an attempt that did not reach a node, a node restarted empty): the contenders no longer
 *   split the votes, the first in line takes every free node, and the others wait for their turn.
 * - An attempt that splits (a minority granted, a minority refused, the rest down: a release still on its
 *   way to some nodes, a hold left on one) retries after a short random delay, as the Redlock spec says,
 *   that doubles while it keeps happening (3 ms, at most ~200 ms), so a hold that lingers on a node cannot
 *   make it spin; an attempt refused by a majority waits for its turn (the release that makes it first
 *   wakes it; the core polls only once a second meanwhile) or the holder's expiry.
 *
 * Safety does not depend on the line: a grant still needs q nodes that each set the lock only while it was
 * free (SET NX semantics), with validity, clean-up, fences and admission as before. The line only narrows
 * who may take a free node; a node that ignored it would only make the lock unfair, never doubly held.
 * Liveness with up to n - q nodes down: let W be the live waiter with the smallest (ticket, id). Its
 * attempts (at least one per second while it waits: the core's poll) put it in line on every node that is
 * up, where nothing live stands before it (dead waiters drop out within `livenessMs`), so every free node
 * that is up grants it, and q of them are up: W acquires at the next release or expiry. Then W leaves the
 * line (its release removes it) and the next one is first. New waiters draw larger tickets, so none waits
 * forever while the lock keeps being released.
 *
 * Waking: a release names, on each node, the first live waiter that is left (see wait.ts): only it
 * re-attempts, not every waiter of every client.
 */
import type { AcquireRequest } from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import type { Votes } from './round.js'

/**
 * How long a node keeps the place of a waiter that stopped asking. A waiting acquire re-attempts at least
 * once a second (the core's poll of a backend that notifies), so a live waiter never drops out; a waiter
 * that dropped out (paused) gets its place back with its next attempt, since its ticket is unchanged.
 */
export const WAITER_LIVENESS_MS = 3000

/** The longest random pause before the first retry after a split vote, as the Redlock spec asks. */
const SPLIT_RETRY_MS = 3
/** How often that pause doubles while the attempts keep ending so (3 ms · 2^6 = 192 ms at most). */
const SPLIT_DOUBLINGS = 6

/** One attempt as a node sees it: its own owner id (`owner`) and its acquire's place in the line. */
export interface NodeRequest extends AcquireRequest {
  /** The acquire's owner id, the same for all its attempts: its entry in each node's line. */
  readonly waiter: string
  /** The acquire's ticket, the same on every node; 0 before it has one (the node then proposes one). */
  readonly ticket: number
  /** How long the node keeps the waiter's place once it stops asking. */
  readonly livenessMs: number
}

/**
 * A node's answer to an acquire: its token; or a refusal, with when it is worth trying again and the
 * waiter's ticket in its line (the node's proposal while the request carried none).
 */
export type NodeAttempt =
  | { readonly granted: true; readonly fence: bigint }
  | { readonly granted: false; readonly retryInMs?: number | undefined; readonly ticket?: number | undefined }

/** An acquire still going: its latest attempt's owner id, its ticket, its attempts in a row that split. */
interface Place {
  attempt: string
  ticket: number
  splits: number
}

/** The places in line of the acquires of one client: their attempt owner ids and tickets. */
export class Tickets {
  /** Bounded: an acquire that ends without telling us (it cannot) leaves an entry behind. */
  readonly #places = new BoundedMap<string, Place>(4096)
  #attemptSeq = 0

  constructor(readonly q: number) {}

  /**
   * The node request of the next attempt of `request`'s acquire: a fresh attempt owner id
   * `<owner>.<attempt>` (see engine.ts for why each attempt has its own) and the acquire's ticket.
   */
  next(request: AcquireRequest): NodeRequest {
    const place = this.#places.get(request.owner) ?? { attempt: '', ticket: 0, splits: 0 }
    place.attempt = `${request.owner}.${(++this.#attemptSeq).toString(36)}`
    this.#places.renew(request.owner, place)
    return this.#request(request, place)
  }

  /** The node request of the latest attempt of `request`'s acquire, if one is known (for `abandon`). */
  latest(request: AcquireRequest): NodeRequest | undefined {
    const place = this.#places.get(request.owner)
    return place && this.#request(request, place)
  }

  /** The acquire has ended (granted or abandoned): forget its place. */
  done(owner: string): void {
    this.#places.delete(owner)
  }

  /**
   * A lost attempt: draws the ticket if the acquire has none yet (the largest place proposed, once q nodes
   * answered), and says when to try again. After a split (a minority taken) soon, after a random pause
   * that doubles while the attempts keep splitting; after a refusal by a majority, `refused()` (when the
   * holds refusing it end; a release wakes the waiter sooner, wait.ts).
   */
  lost(
    owner: string,
    votes: Votes<NodeAttempt>,
    split: boolean,
    refused: () => { retryInMs?: number },
  ): { retryInMs?: number; queued?: boolean } {
    const place = this.#places.get(owner)
    if (place && place.ticket === 0) {
      let answered = 0
      let proposed = 0
      for (const v of votes) {
        if (!v?.ok) continue
        answered++
        if (!v.value.granted && v.value.ticket !== undefined && v.value.ticket > proposed)
          proposed = v.value.ticket
      }
      if (answered >= this.q) place.ticket = proposed
    }
    if (!split) {
      if (place) place.splits = 0
      // In line on the nodes that refused: the release that makes it first names it (wait.ts).
      return place && place.ticket > 0 ? { ...refused(), queued: true } : refused()
    }
    const doublings = Math.min(place ? place.splits++ : 0, SPLIT_DOUBLINGS)
    return { retryInMs: Math.random() * SPLIT_RETRY_MS * 2 ** doublings }
  }

  #request(request: AcquireRequest, place: Place): NodeRequest {
    return {
      ...request,
      owner: place.attempt,
      waiter: request.owner,
      ticket: place.ticket,
      livenessMs: WAITER_LIVENESS_MS,
    }
  }
}
