/**
 * Retiring released `cas-lease` records, so that the store keeps one record per lock held or recently
 * held, not one per name ever used. A record goes by a delete conditioned on the version this process
 * last wrote (never a blind one: a refusal means someone wrote since, and the record stays). A delete is
 * safe at any age of the record (fence.ts: no fence is handed out before it is settled, so a record
 * made again starts above every one of them); when it is sent is only a matter of cost: a name taken
 * again after its record went pays a new record's wait (the store's clock ticking twice).
 * - A release marks the record released (free at once for the next writer) and it waits here for
 *   `IDLE_MS`: a lock taken again soon, as most are, keeps its record. A bounded set of pending
 *   retires, swept by ONE unref'd timer of the engine (an engine may keep a timer: nothing in the core
 *   owns this store-specific clean-up). An acquire of the key in this process cancels its retire.
 * - `close()` stops the timer and sends every pending delete at once, within `CLOSE_CAP_MS`; what is
 *   left stays released in the store, free to take, and is retired by its next holder's release.
 * - Without a server clock in the answers nothing is retired: the fence is then the record's counter
 *   alone, which a delete would start again at 1.
 * A record whose holder crashed is not retired here (nobody in this process released it): it stays
 * until someone takes it over, and its next holder's release retires it.
 */
import { setMaxListeners } from 'node:events'
import { BoundedMap } from '../../core/bounded-map.js'
import { now } from '../../core/clock.js'
import type { CasIo } from './write.js'

/** A released record of ours waiting to be deleted. */
interface PendingRetire {
  readonly version: string
  /** When it is due, on the monotonic clock. */
  readonly dueAt: number
}

/** Pending retires kept; forgetting one leaves a released record in the store, never a safety issue. */
const PENDING_KEPT = 100_000
/** How long a released record stays for a next grant of its name before it is deleted. */
export const IDLE_MS = 5000
/** Between sweeps. */
const SWEEP_EVERY_MS = 1000
/** Deletes of a sweep in flight at once. */
const SWEEP_PARALLEL = 16
/** What `close()` spends on the pending retires at most. */
export const CLOSE_CAP_MS = 2000

export class CasRetirer {
  readonly #io: CasIo
  readonly #pending = new BoundedMap<string, PendingRetire>(PENDING_KEPT)
  #timer: ReturnType<typeof setTimeout> | undefined
  #sweeping: Promise<void> | undefined
  /** Aborted by `close()`: a sweep of the timer in flight stops, so that close is bounded. */
  readonly #stop = new AbortController()
  #closed = false

  constructor(io: CasIo) {
    this.#io = io
  }

  /** Whether this store can retire records (a conditional delete, and a server clock in its answers). */
  get enabled(): boolean {
    return this.#io.adapter.delete !== undefined && this.#io.serverSecond !== undefined
  }

  /** Pending retires (tests, diagnostics). */
  get pending(): number {
    return this.#pending.size
  }

  /** Retires `key`'s released record at `version` once it has stayed released for `IDLE_MS`. */
  schedule(key: string, version: string): void {
    if (!this.enabled || this.#closed) return
    this.#pending.set(key, { version, dueAt: now() + IDLE_MS })
    this.#arm()
  }

  /** An acquire of `key` in this process: its record is about to be written again, not deleted. */
  cancel(key: string): void {
    this.#pending.delete(key)
  }

  /** Stops the timer and sends every pending delete now, within `CLOSE_CAP_MS`. */
  async close(): Promise<void> {
    this.#closed = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    this.#stop.abort()
    await this.#sweeping
    if (this.#pending.size === 0) return
    const signal = AbortSignal.timeout(CLOSE_CAP_MS)
    await this.#sweep(signal, Number.POSITIVE_INFINITY).catch(() => {})
    this.#pending.clear()
  }

  #arm(): void {
    if (this.#timer !== undefined || this.#closed) return
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      const signal = AbortSignal.any([AbortSignal.timeout(10 * SWEEP_EVERY_MS), this.#stop.signal])
      this.#sweeping = this.#sweep(signal, now())
        .catch(() => {})
        .finally(() => {
          this.#sweeping = undefined
          if (this.#pending.size > 0) this.#arm()
        })
    }, SWEEP_EVERY_MS)
    this.#timer.unref()
  }

  /** One pass: every delete due by `at`. */
  async #sweep(signal: AbortSignal, at: number): Promise<void> {
    // Its deletes in flight each listen to it (the SDK, the store's pacing): more than Node's default of 10.
    setMaxListeners(0, signal)
    const io = this.#io
    const due = [...this.#pending].filter(([, p]) => p.dueAt <= at)
    for (let i = 0; i < due.length && !signal.aborted; i += SWEEP_PARALLEL) {
      await Promise.all(
        due.slice(i, i + SWEEP_PARALLEL).map(async ([key, p]) => {
          // Cancelled meanwhile (an acquire of the key), or rescheduled at another version.
          if (this.#pending.get(key) !== p) return
          this.#pending.delete(key)
          // A refusal (someone wrote since) or a failure leaves the record: still correct, just kept.
          await io.remove(key, p.version, signal).catch(() => {})
        }),
      )
    }
  }
}
