/**
 * Reads of a `cas-lease` record shared by every acquire of one process that needs one at the same time
 * (single flight per key): 100 waiters of one key cost the store the reads of one. A caller says how
 * fresh its read must be: `notBefore`, the moment after which it must have been SENT.
 * - A read of the key in flight and sent after `notBefore` is joined: its answer is the caller's.
 * - One in flight but sent earlier cannot answer the caller (it may have been served before a change the
 *   caller must see: a release elsewhere just before a `tryAcquire`, our own write just refused): the
 *   caller waits for the NEXT read of the key, sent as soon as that one settles, together with every
 *   other caller that came too late for it. A burst of new acquires costs two reads, not one each.
 * - None in flight: one is sent.
 * Each caller waits under its own signal; the read itself is aborted only once every caller has left,
 * so a caller with a short deadline never cuts the read short for one with a longer one.
 *
 * Why sharing is safe for the observed expiry (observe.ts): what a read returns is noted once, at
 * its return, for the whole process; every rule of the engine reasons from when a read RETURNED and what
 * it showed, never from who asked for it, so a caller that joined a read sent before it came is as well
 * served as the one that sent it (the freshness a caller needs is what `notBefore` is for).
 */
import { now } from '../../core/clock.js'
import type { ServerClock } from './fence.js'

/** One read of one key, its answer shared by the callers that joined it. */
class Flight<T> {
  /** When it was sent; undefined while it waits for the read before it to settle. */
  sentAt: number | undefined
  /** Callers waiting for its answer. */
  callers = 0
  /** Settled, or abandoned by every caller: joined no more, and the read queued behind it is sent. */
  over = false
  /** The read that callers too late for this one wait for. */
  next: Flight<T> | undefined
  readonly controller = new AbortController()
  readonly answer: Promise<T>
  resolve!: (value: T) => void
  reject!: (error: unknown) => void

  constructor() {
    this.answer = new Promise<T>((resolve, reject) => {
      this.resolve = resolve
      this.reject = reject
    })
    // A read every caller left still settles; nobody listens then.
    this.answer.catch(() => {})
  }
}

/** What a shared read returned: its result, and the server's clock of its answer (fence.ts). */
export interface SharedAnswer<T> {
  readonly value: T
  readonly seconds: number | undefined
}

/** Single-flight reads per key over `send`, which does the request (and notes what it saw). */
export class SharedReads<T> {
  /** The read of each key in flight (the latest sent). */
  readonly #flying = new Map<string, Flight<SharedAnswer<T>>>()

  constructor(readonly send: (key: string, signal: AbortSignal, clock: ServerClock) => Promise<T>) {}

  /** The answer of a read of `key` sent after `notBefore` (a moment of `now()`). */
  read(key: string, signal: AbortSignal, notBefore: number): Promise<SharedAnswer<T>> {
    if (signal.aborted) return Promise.reject(signal.reason)
    let flight = this.#flying.get(key)
    if (flight === undefined) flight = this.#launch(key, new Flight())
    else if (flight.sentAt! <= notBefore) flight = flight.next ??= new Flight()
    return this.#join(key, flight, signal)
  }

  /** Reads in flight (tests). */
  get inFlight(): number {
    return this.#flying.size
  }

  #launch(key: string, flight: Flight<SharedAnswer<T>>): Flight<SharedAnswer<T>> {
    flight.sentAt = now()
    this.#flying.set(key, flight)
    const clock: ServerClock = {}
    this.send(key, flight.controller.signal, clock)
      .then(
        (value) => flight.resolve({ value, seconds: clock.seconds }),
        (error: unknown) => flight.reject(error),
      )
      .finally(() => this.#land(key, flight))
    return flight
  }

  /** `flight` is over (settled or abandoned): the read queued behind it goes, if anyone still waits for it. */
  #land(key: string, flight: Flight<SharedAnswer<T>>): void {
    if (flight.over) return
    flight.over = true
    if (this.#flying.get(key) === flight) this.#flying.delete(key)
    const next = flight.next
    if (next !== undefined && next.callers > 0) this.#launch(key, next)
  }

  #join(key: string, flight: Flight<SharedAnswer<T>>, signal: AbortSignal): Promise<SharedAnswer<T>> {
    flight.callers += 1
    return new Promise<SharedAnswer<T>>((resolve, reject) => {
      let left = false
      const leave = (): boolean => {
        if (left) return false
        left = true
        signal.removeEventListener('abort', abort)
        flight.callers -= 1
        return true
      }
      const abort = () => {
        if (!leave()) return
        reject(signal.reason)
        // The last caller of a read in flight left: nobody needs it. (One still queued is never sent.)
        if (flight.callers === 0 && flight.sentAt !== undefined && !flight.over) {
          flight.controller.abort(signal.reason)
          this.#land(key, flight)
        }
      }
      signal.addEventListener('abort', abort, { once: true })
      flight.answer.then(
        (answer) => leave() && resolve(answer),
        (error: unknown) => leave() && reject(error),
      )
    })
  }
}
