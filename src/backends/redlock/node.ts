/**
 * One Redis master of a Redlock set: the single-node Redis backend (its scripts, errors and pub/sub), plus
 * what only Redlock needs to know about the server: has it restarted? A master restarted without
 * persistence has forgotten the locks it held; counting it toward a quorum at once lets a second client
 * take a lock the first still holds on the other majority (the Redlock spec's crash-recovery section).
 * So a node votes only once it has been up for `restartDelay` (the spec's *delayed restart*, enforced here
 * on the client side instead of by the operator).
 */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../core/abort.js'
import { now } from '../../core/clock.js'
import { BackendUnavailableError } from '../../core/errors.js'
import { parseInfo, type RedisBackend } from '../redis/index.js'
import { ACQUIRE, EXTEND, INSPECT, RAISE_FENCE, RELEASE } from '../redis/scripts.js'

/** The scripts Redlock runs on each node. */
const REDLOCK_SCRIPTS = [ACQUIRE, RELEASE, EXTEND, RAISE_FENCE, INSPECT]

export class RedlockNode {
  /** Bumped whenever the connection closes: whatever answers next may be a restarted server. */
  #epoch = 0
  #verifiedEpoch = -1
  #verifying: Promise<void> | undefined
  /** When the server started, on our monotonic clock (the latest moment its uptime allows). */
  #startedAt = Number.NEGATIVE_INFINITY
  #runId: string | undefined
  #restarted = false

  constructor(
    readonly index: number,
    readonly id: string,
    readonly client: Redis,
    readonly backend: RedisBackend,
  ) {
    // Runs before any reply of the next connection can be read, so no command slips through unchecked.
    client.on('close', () => {
      this.#epoch++
    })
  }

  /** The server's run id, once seen. */
  get runId(): string | undefined {
    return this.#runId
  }

  /**
   * Resolves when this node may vote: its current connection has been checked, and its server has been up
   * for at least `restartDelayMs`. Throws (a failure of this node in the round) otherwise.
   */
  async ready(restartDelayMs: number, signal: AbortSignal): Promise<void> {
    if (this.#verifiedEpoch !== this.#epoch) await raceSignal(this.#verify(), signal)
    if (this.votes(restartDelayMs)) return
    const upMs = now() - this.#startedAt
    throw new BackendUnavailableError(
      `${this.id} ${this.#restarted ? `restarted (its run_id changed)` : 'started'} ${Math.floor(upMs / 1000)} s ago; ` +
        `it does not count toward a quorum until it has been up for ${Math.ceil(restartDelayMs / 1000)} s ` +
        '(restartDelay, the largest ttl in use): a node restarted without persistence has forgotten the locks it held',
      { backend: this.id },
    )
  }

  /** True when the node may vote now without any check (the common case: no await, no promise). */
  votes(restartDelayMs: number): boolean {
    return (
      this.#verifiedEpoch === this.#epoch &&
      (restartDelayMs <= 0 || now() - this.#startedAt >= restartDelayMs)
    )
  }

  #verify(): Promise<void> {
    this.#verifying ??= (async () => {
      const epoch = this.#epoch
      try {
        await connected(this.client)
        // Loaded before the node votes, with the INFO in one round trip: a fresh server would otherwise
        // answer the first acquire NOSCRIPT, and its source, re-sent a round trip later, could land after the
        // attempt's clean-up and leave a stray hold until its ttl.
        const [, info] = await Promise.all([
          Promise.all(REDLOCK_SCRIPTS.map((s) => this.client.script('LOAD', s.source))),
          this.client.info('server').then(parseInfo),
        ])
        const uptimeS = Number(info.uptime_in_seconds)
        // Uptime is whole seconds, rounded down: the server started at the latest `uptime` seconds ago.
        // Assuming the latest start keeps the quarantine at least as long as it must be.
        this.#startedAt = now() - (Number.isFinite(uptimeS) ? uptimeS * 1000 : 0)
        if (this.#runId !== undefined && this.#runId !== info.run_id) this.#restarted = true
        this.#runId = info.run_id
        this.#verifiedEpoch = epoch
      } finally {
        this.#verifying = undefined
      }
    })()
    return this.#verifying
  }
}

/** Resolves once the client's connection is ready (dlock's node clients do not queue commands offline). */
function connected(client: Redis): Promise<void> {
  if (client.status === 'ready') return Promise.resolve()
  if (client.status === 'wait') client.connect().catch(() => {})
  if (client.status === 'end') {
    return Promise.reject(new Error('the connection was closed (client.quit() or disconnect())'))
  }
  return new Promise((resolve) => client.once('ready', () => resolve()))
}
