/**
 * How often a client retires rows in the background of its grants (the lease engine's ended rows, the
 * semaphore engine's idle semaphores): at most one retiring statement at a time per client, once per
 * `everyMs`, or at once again after a full batch (a backlog). A failure only waits for the next round:
 * nothing depends on retiring but the tables' size.
 */
import { now, withTimeout } from '../../core/clock.js'

export class RetirePacer {
  readonly #everyMs: number
  readonly #batch: number
  readonly #statementMs: number
  /** When the last round started (monotonic ms), and whether one is running. */
  #retiredAt = Number.NEGATIVE_INFINITY
  #retiring = false

  /** `batch`: the most a round retires; `statementMs`: how long a round may take. */
  constructor(everyMs: number, batch: number, statementMs: number) {
    this.#everyMs = everyMs
    this.#batch = batch
    this.#statementMs = statementMs
  }

  /** Starts `retire` (it resolves to how many it retired, at most a batch) unless the pace says wait. */
  retire(retire: (signal: AbortSignal) => Promise<number>): void {
    if (this.#retiring || now() - this.#retiredAt < this.#everyMs) return
    this.#retiring = true
    const started = now()
    withTimeout(this.#statementMs, retire).then(
      (retired) => {
        this.#retiring = false
        this.#retiredAt = retired >= this.#batch ? Number.NEGATIVE_INFINITY : started
      },
      () => {
        this.#retiring = false
        this.#retiredAt = started
      },
    )
  }
}
