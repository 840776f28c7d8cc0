/**
 * One Redis master of a Redlock set: the single-node Redis backend (its scripts, errors and pub/sub), plus
 * what only Redlock needs to know about the server: has it restarted, and may it vote?
 *
 * - Delayed restart (for the locks): a master restarted without persistence has forgotten the locks it
 *   held; counting it toward a quorum at once lets a second client take a lock the first still holds on
 *   the other majority (the Redlock spec's crash-recovery section). So a node votes only once it has been
 *   up for `restartDelay` (the spec's *delayed restart*, enforced here on the client side), unless the
 *   bootstrap of a fresh set admitted its server process (`<prefix>!fresh` names it): the set held no
 *   trace of any lock then, so there is nothing this process could have forgotten (admission.ts says when
 *   a set counts as fresh, and why that is safe).
 * - Admission (for the fences): a node votes only while its server process is admitted, that is, its fence
 *   counters were caught up from the other nodes after it (re)started (admission.ts). The state lives on
 *   the node (`<prefix>!admitted` = the admitted run_id), so a client that connects after a restart sees
 *   it as well as one that saw the restart.
 *
 * Both are checked once per connection: INFO, the admission state and the scripts travel together, in one
 * round trip, whenever the connection is (re)established. A node not admitted is caught up in the
 * background (a fresh set at once; a restarted node once its server has been up for restartDelay, when it
 * could vote anyway); the hot path (an acquire on admitted nodes) has no extra round trip.
 * A little over ~300 lines: the connection check and the scheduling of catch-ups share one state (epoch,
 * run_id, admitted, the catch-up under way) and are read together; the catch-up itself is admission.ts.
 */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../core/abort.js'
import { now, sleep } from '../../core/clock.js'
import { BackendUnavailableError } from '../../core/errors.js'
import { parseInfo, type RedisBackend } from '../redis/index.js'
import { EXTEND, INSPECT, type Script } from '../redis/scripts.js'
import { AdmissionError, type AdmissionState, type NodeState } from './admission-state.js'
import { connected, reachable } from './connection.js'
import { type FenceKeys, fenceKeys, firstFence, raiseCounter, readFences } from './fences.js'
import { admissionMarker, freshMarker, IN_USE } from './layout.js'
import type { LineMode } from './line.js'
import { ADMIT, LINE_ACQUIRE, LINE_CLEAN_UP, LINE_LEAVE, LINE_RELEASE, RAISE, STATE } from './scripts.js'

/** The scripts Redlock runs on each node. */
const REDLOCK_SCRIPTS = [
  LINE_ACQUIRE,
  LINE_RELEASE,
  LINE_CLEAN_UP,
  LINE_LEAVE,
  EXTEND,
  RAISE,
  INSPECT,
  STATE,
  ADMIT,
]

/** The shortest pause between two catch-ups of a node that failed (they run when the node is needed). */
const RETRY_MS = 500

/**
 * Catches a node up and admits it, or rejects with why not (the backend's `catchUp` over all nodes, with
 * its restartDelay).
 */
export type CatchUp = (node: RedlockNode, delayMs: number, closed: AbortSignal) => Promise<void>

export class RedlockNode {
  /** Bumped whenever the connection closes: whatever answers next may be a restarted server. */
  #epoch = 0
  #verifiedEpoch = -1
  #verifying: Promise<void> | undefined
  /** When the server started, on our monotonic clock (the latest moment its uptime allows). */
  #startedAt = Number.NEGATIVE_INFINITY
  #runId: string | undefined
  #restarted = false
  /** The verified server process is admitted: its fence counters are caught up, it may vote. */
  #admitted = false
  /** The verified server process was admitted by the bootstrap of a fresh set: no delayed restart. */
  #fresh = false
  /** This client has seen the set in use on this node: a marker, or a restart (see admission.ts). */
  #sawUse = false
  #catchingUp: Promise<void> | undefined
  /** Why the latest catch-up did not admit the node. */
  #refusal: AdmissionError | undefined
  /** No new catch-up before this moment (after one that failed), except the one then due. */
  #notBefore = Number.NEGATIVE_INFINITY
  /** A catch-up due once the server has been up for restartDelay (aborted: no longer due). */
  #due: AbortController | undefined
  readonly #closed = new AbortController()
  readonly #marker: string
  readonly #freshMarker: string
  readonly #fences: FenceKeys
  /** The connection error since the last ready connection (a node that is down fails a round at once). */
  #lastError: (Error & { code?: unknown }) | undefined
  readonly #onClose = () => {
    this.#epoch++
  }
  readonly #onError = (error: Error) => {
    this.#lastError = error
  }
  readonly #onReady = () => {
    this.#lastError = undefined
    // A connection that comes back may lead to a restarted server: check it now, and catch it up if it
    // needs it, rather than at the next acquire (which would then find it unable to vote).
    if (this.#verifiedEpoch >= 0 && this.#verifiedEpoch !== this.#epoch) this.#verify().catch(() => {})
  }

  constructor(
    readonly index: number,
    readonly id: string,
    readonly client: Redis,
    readonly backend: RedisBackend,
    /** The mode of `backend`: the node's waiting line (its clean-up is not a primitive of the backend). */
    readonly line: LineMode,
    readonly catchUp: CatchUp,
    /** How long a restarted server must have been up before it is caught up (see admission.ts). */
    readonly restartDelay: () => number,
  ) {
    // Runs before any reply of the next connection can be read, so no command slips through unchecked.
    client.on('close', this.#onClose)
    client.on('ready', this.#onReady)
    client.on('error', this.#onError)
    // The prefix, as the Redis backend applies it: `<prefix>{<key>}`.
    const { lock } = backend.keysOf('k')
    const prefix = lock.slice(0, -'{k}'.length)
    this.#marker = admissionMarker(prefix)
    this.#freshMarker = freshMarker(prefix)
    this.#fences = fenceKeys(prefix)
  }

  /** host:port, for messages. */
  get address(): string {
    return this.id.replace(/^rediss?:\/\//, '')
  }

  /** The server's run id, once seen. */
  get runId(): string | undefined {
    return this.#runId
  }

  /** How long the checked server has been up, at least (on our monotonic clock). */
  get upMs(): number {
    return now() - this.#startedAt
  }

  /** This client has seen the set in use on this node (a marker, or its server restarted). */
  get sawUse(): boolean {
    return this.#sawUse
  }

  /** The admission state of the server process behind the current connection, as far as known. */
  get admission(): { state: AdmissionState | 'unknown'; reason?: string; fresh?: boolean } {
    if (this.#verifiedEpoch !== this.#epoch) return { state: 'unknown' }
    if (this.#admitted) return { state: 'admitted', fresh: this.#fresh && !this.#restarted }
    const why = this.#refusal
    return why ? { state: why.state, reason: why.message } : { state: 'catching-up' }
  }

  /**
   * Resolves when this node may vote: its current connection has been checked, its server process is
   * admitted (caught up, if it needed to), and it has been up for at least `restartDelayMs`. Throws (a
   * failure of this node in the round) otherwise.
   */
  async ready(restartDelayMs: number, signal: AbortSignal): Promise<void> {
    await this.checked(signal)
    if (!this.#admitted) {
      const catching = this.#startCatchUp()
      // The catch-up goes on after the round has given up on this node; its outcome is kept.
      if (catching) await raceSignal(catching, signal).catch(() => {})
      if (!this.#admitted) throw this.#notAdmitted()
    }
    if (this.votes(restartDelayMs)) return
    const upMs = now() - this.#startedAt
    throw new BackendUnavailableError(
      `${this.#restarted ? 'restarted' : 'started'} ${Math.floor(upMs / 1000)} s ago: votes in ` +
        `~${Math.ceil((restartDelayMs - upMs) / 1000)} s (restartDelay ${Math.ceil(restartDelayMs / 1000)} s)`,
      { backend: this.id },
    )
  }

  /** True when the node may vote now without any check (the common case: no await, no promise). */
  votes(restartDelayMs: number): boolean {
    return (
      this.#verifiedEpoch === this.#epoch &&
      this.#admitted &&
      // Fresh, unless this client saw the node restart: it knows the set was in use (admission.ts).
      ((this.#fresh && !this.#restarted) || restartDelayMs <= 0 || now() - this.#startedAt >= restartDelayMs)
    )
  }

  /** True when the current connection has been checked (enough for a release or an inspect). */
  get isChecked(): boolean {
    return this.#verifiedEpoch === this.#epoch
  }

  /**
   * Resolves once the current connection has been checked (its scripts loaded, its state read). Rejects at
   * once while the client reconnects after a connection error: the node is down, and waiting for it would
   * only spend the round's (or a catch-up step's) time.
   */
  async checked(signal: AbortSignal): Promise<void> {
    if (this.#verifiedEpoch === this.#epoch) return
    const down = this.#lastError
    if (down && this.client.status === 'reconnecting') {
      throw new Error(`unreachable (${typeof down.code === 'string' ? down.code : down.message})`)
    }
    await raceSignal(this.#verify(), signal)
  }

  /** Resolves when the catch-up under way, if any, has ended (for `doctor`). */
  async settled(signal: AbortSignal): Promise<void> {
    if (this.#catchingUp) await raceSignal(this.#catchingUp, signal)
  }

  /**
   * Resolves once the client is connected, or rejects with the first connection error (for `doctor`,
   * which reports a node that cannot be reached instead of waiting for it).
   */
  reachable(signal: AbortSignal): Promise<void> {
    return reachable(this.client, signal)
  }

  /** Stops the node's background work and listeners (the client itself is the caller's). */
  dispose(): void {
    this.#closed.abort(new Error('the Redlock backend was closed'))
    this.#due?.abort()
    this.client.off('close', this.#onClose)
    this.client.off('ready', this.#onReady)
    this.client.off('error', this.#onError)
  }

  // ---- What a catch-up (admission.ts) does on this node. Each is bounded by STEP_MS per round trip (fences.ts).

  /** The run_id and the admission marker, in one atomic step (the STATE script). */
  async readState(signal: AbortSignal): Promise<NodeState> {
    await this.checked(signal)
    const [runId, marker, fresh] = (await raceSignal(
      this.#run(STATE, [this.#marker, this.#freshMarker], []),
      signal,
    )) as [string, string | null, string | null]
    if (marker !== null) this.#sawUse = true
    return { runId, marker, fresh }
  }

  /**
   * Writes `runId` as the marker (and as the fresh marker, when `fresh`) if, and only if, the server still
   * runs as `runId` (the ADMIT script).
   */
  async admit(runId: string, fresh: boolean, signal: AbortSignal): Promise<boolean> {
    const keys = [this.#marker, this.#freshMarker]
    return (await raceSignal(this.#run(ADMIT, keys, [runId, fresh ? '1' : '0']), signal)) === 1
  }

  /** Writes IN_USE as the marker if there is none: a trace that the set is in use (it admits nothing). */
  async markInUse(signal: AbortSignal): Promise<void> {
    await raceSignal(this.client.set(this.#marker, IN_USE, 'NX'), signal)
  }

  /** The node's counter and every name's fence key under the prefix (fences.ts). */
  readFences(closed: AbortSignal): Promise<Map<string, bigint>> {
    return readFences(this.client, this.#fences, closed)
  }

  /** The name of one fence counter under the prefix, or undefined if there is none (for a bootstrap). */
  firstFence(closed: AbortSignal): Promise<string | undefined> {
    return firstFence(this.client, this.#fences, closed)
  }

  /** Raises this node's counter to the largest of `values` (never lowers it). */
  raiseFences(values: ReadonlyMap<string, bigint>, closed: AbortSignal): Promise<void> {
    return raiseCounter(this.client, this.#fences, values, closed)
  }

  /**
   * Called by a catch-up (or, `fresh`, a bootstrap) that admitted `runId`: this node votes if that is the
   * process it checked.
   */
  admitted(runId: string, fresh: boolean): void {
    this.#sawUse = true
    if (runId === this.#runId && this.#verifiedEpoch === this.#epoch) {
      this.#admitted = true
      this.#fresh = fresh
      this.#refusal = undefined
    }
  }

  /**
   * The error of a round for a node that may not vote yet, short (the quorum's error lists every node):
   * why, and when it will vote. The catch-up's refusal says which.
   */
  #notAdmitted(): BackendUnavailableError {
    return new BackendUnavailableError(
      this.#refusal?.message ?? 'catching up its fence counters (a few round trips)',
      { backend: this.id },
    )
  }

  /**
   * The catch-up under way, or a new one; none while a failed one is recent (failed ones run again on
   * demand, or when due: one that was too early is due once the server has been up for restartDelay).
   */
  #startCatchUp(): Promise<void> | undefined {
    if (this.#admitted || this.#closed.signal.aborted) return undefined
    if (this.#catchingUp) return this.#catchingUp
    if (now() < this.#notBefore) return undefined
    const run = this.catchUp(this, this.restartDelay(), this.#closed.signal).then(
      () => {
        this.#refusal = undefined
      },
      (error: unknown) => {
        this.#refusal =
          error instanceof AdmissionError
            ? error
            : new AdmissionError(
                'catching-up',
                `catch-up failed (${(error as Error)?.message ?? error}); tries again`,
              )
        // Too early: due once the server has been up for restartDelay (on a timer, even if nobody asks).
        // Any other failure: again when the node is next needed, not sooner than RETRY_MS.
        const retry = (error as AdmissionError).retryInMs
        this.#notBefore = now() + (retry ?? RETRY_MS)
        if (retry !== undefined) this.#catchUpIn(retry)
      },
    )
    this.#catchingUp = run.finally(() => {
      this.#catchingUp = undefined
    })
    return this.#catchingUp
  }

  /** Starts a catch-up in `ms` (without keeping the process alive), instead of any due before. */
  #catchUpIn(ms: number): void {
    this.#due?.abort()
    const due = new AbortController()
    this.#due = due
    void sleep(ms + 5, due.signal, { ref: false }).then(() => {
      if (due.signal.aborted) return
      this.#due = undefined
      void this.#startCatchUp()
    })
  }

  /** Runs a script by its SHA; sends the source if the server does not know it (NOSCRIPT). */
  async #run(s: Script, keys: string[], args: string[]): Promise<unknown> {
    try {
      return await this.client.evalsha(s.sha, keys.length, ...keys, ...args)
    } catch (error) {
      if (error instanceof Error && error.message.startsWith('NOSCRIPT')) {
        return this.client.eval(s.source, keys.length, ...keys, ...args)
      }
      throw error
    }
  }

  #verify(): Promise<void> {
    this.#verifying ??= (async () => {
      const epoch = this.#epoch
      try {
        await connected(this.client)
        // Loaded before the node votes, with the INFO and the admission state in one round trip: a fresh
        // server would otherwise answer the first acquire NOSCRIPT, and its source, re-sent a round trip
        // later, could land after the attempt's clean-up and leave a stray hold until its ttl. (Sent in
        // this order on one connection, so STATE runs after its script is loaded.)
        const [, info, state] = await Promise.all([
          Promise.all(REDLOCK_SCRIPTS.map((s) => this.client.script('LOAD', s.source))),
          this.client.info('server').then(parseInfo),
          this.client.evalsha(STATE.sha, 2, this.#marker, this.#freshMarker) as Promise<
            [string, string | null, string | null]
          >,
        ])
        const uptimeS = Number(info.uptime_in_seconds)
        // Uptime is whole seconds, rounded down: the server started at the latest `uptime` seconds ago.
        // Assuming the latest start keeps the quarantine at least as long as it must be.
        this.#startedAt = now() - (Number.isFinite(uptimeS) ? uptimeS * 1000 : 0)
        if (this.#runId !== undefined && this.#runId !== info.run_id) this.#restarted = true
        this.#runId = info.run_id
        // Admitted iff the marker names this very process (STATE read both atomically); fresh iff a
        // bootstrap admitted it.
        this.#admitted = state[0] === info.run_id && state[1] === state[0]
        this.#fresh = this.#admitted && state[2] === state[0]
        if (this.#admitted) this.#refusal = undefined
        if (this.#restarted || state[1] !== null) this.#sawUse = true
        this.#verifiedEpoch = epoch
      } finally {
        this.#verifying = undefined
      }
      // Not admitted: catch up in the background, now or when due (an acquire, or the doctor, waits for
      // the same run).
      if (this.#verifiedEpoch === epoch && !this.#admitted) {
        this.#notBefore = Number.NEGATIVE_INFINITY
        void this.#startCatchUp()
      }
    })()
    return this.#verifying
  }
}
