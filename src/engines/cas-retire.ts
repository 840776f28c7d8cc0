/**
 * Retiring released `cas-lease` records, so that the store keeps one record per lock held or recently
 * held, not one per name ever used. A record goes by a delete conditioned on the version this process
 * last wrote (never a blind one: a refusal means someone wrote since, and the record stays), and only
 * once its fence is below the epoch of a server second seen before the delete (`retirable`,
 * cas-fence.ts says why every later record of the key then starts above it).
 * - A release whose fence the rule already allows IS the delete (cas-hold.ts): one request, as before.
 * - Otherwise (a record made new less than about three seconds ago) the release marks it released and
 *   it waits here: a bounded set of pending retires, swept by ONE unref'd timer of the engine (an engine
 *   may keep a timer: nothing in the core owns this store-specific clean-up). A sweep without a recent
 *   enough server second reads one pending record first (its answer shows the store's clock), then sends
 *   the deletes the rule allows. An acquire of the key in this process cancels its pending retire.
 * - `close()` stops the timer and sends what the rule allows at once, within `CLOSE_CAP_MS`; what is
 *   left (a record released less than about three seconds before) stays released in the store, as
 *   every record did before fencelock retired any, and is free to take.
 * A record whose holder crashed is not retired here (nobody in this process released it): it stays
 * released or held until someone takes it over, and its next holder's release retires it.
 */
import { setMaxListeners } from 'node:events'
import { BoundedMap } from '../core/bounded-map.js'
import { retirable } from './cas-fence.js'
import type { CasIo } from './cas-write.js'

/** A released record of ours waiting for the store's clock to allow its delete. */
interface PendingRetire {
  readonly version: string
  readonly fence: bigint
}

/** Pending retires kept; forgetting one leaves a released record in the store, never a safety issue. */
const PENDING_KEPT = 100_000
/** Between sweeps: the rule advances with the store's clock, one second at a time. */
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

  /** Whether this store can retire records at all (a driver with a conditional delete). */
  get enabled(): boolean {
    return this.#io.driver.delete !== undefined
  }

  /** Pending retires (tests, diagnostics). */
  get pending(): number {
    return this.#pending.size
  }

  /** Retires `key`'s released record at `version` once the rule allows it. */
  schedule(key: string, version: string, fence: bigint): void {
    if (!this.enabled || this.#closed) return
    this.#pending.set(key, { version, fence })
    this.#arm()
  }

  /** An acquire of `key` in this process: its record is about to be written again, not deleted. */
  cancel(key: string): void {
    this.#pending.delete(key)
  }

  /** Stops the timer and sends the deletes the rule allows now, within `CLOSE_CAP_MS`. */
  async close(): Promise<void> {
    this.#closed = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    this.#stop.abort()
    await this.#sweeping
    if (this.#pending.size === 0) return
    const signal = AbortSignal.timeout(CLOSE_CAP_MS)
    await this.#sweep(signal).catch(() => {})
    this.#pending.clear()
  }

  #arm(): void {
    if (this.#timer !== undefined || this.#closed) return
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      const signal = AbortSignal.any([AbortSignal.timeout(10 * SWEEP_EVERY_MS), this.#stop.signal])
      this.#sweeping = this.#sweep(signal)
        .catch(() => {})
        .finally(() => {
          this.#sweeping = undefined
          if (this.#pending.size > 0) this.#arm()
        })
    }, SWEEP_EVERY_MS)
    this.#timer.unref()
  }

  /** One pass: the store's clock refreshed if no pending retire is allowed yet, then every allowed delete. */
  async #sweep(signal: AbortSignal): Promise<void> {
    // Its deletes in flight each listen to it (the SDK, the store's pacing): more than Node's default of 10.
    setMaxListeners(0, signal)
    const io = this.#io
    const allowed = () => [...this.#pending].filter(([, p]) => retirable(p.fence, io.serverSecond))
    let due = allowed()
    const first = this.#pending.keys().next()
    if (due.length === 0 && !first.done) {
      // A read of a pending record: its answer shows the store's clock (and it is a request we would
      // otherwise not make: the sweep's only cost beyond the deletes).
      await io.read(first.value, signal)
      due = allowed()
    }
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
