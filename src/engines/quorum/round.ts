/**
 * One round of a quorum protocol: the same operation sent to every node at once, each node bounded by a
 * per-node timeout, and a verdict as soon as the votes in so far settle it (Redlock decides at a majority,
 * it does not wait for the slowest node). Kept apart from what the operations are, so acquire, extend,
 * release and inspect (engine.ts) and Redlock's admission catch-up share one piece of timing code.
 */
import { linkedAbort } from '../../core/abort.js'
import { timerDelay } from '../../core/clock.js'

/** One node's answer, or why it has none (its error, or the per-node timeout). */
export type Vote<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly error: unknown }

/** The votes at the moment of the verdict; `undefined` marks a node that had not answered yet. */
export type Votes<T> = ReadonlyArray<Vote<T> | undefined>

/** A node that did not answer within its time. */
export class NodeTimeoutError extends Error {
  override name = 'NodeTimeoutError'
}

/** The reason operations still running are stopped with when the verdict is in (`after.stop`). */
const VERDICT = Object.freeze({ name: 'Verdict', message: 'the round was decided without this node' })

/** What to do with the operations still running when the verdict is in. */
export interface AfterVerdict<T, V> {
  /**
   * Stop them (their signal aborts) after this verdict: for an acquire that won, a node not yet sent to
   * gets nothing.
   */
  readonly stop?: (verdict: V) => boolean
  /** Each answer (or failure) that arrives after the verdict, from an operation that was not stopped. */
  readonly late?: (node: number, vote: Vote<T>, verdict: V) => void
}

/**
 * Runs `op` on nodes `0 … count-1` at once and resolves with `decide`'s verdict as soon as it gives one.
 * `decide` sees the votes after each answer; once every node has answered or timed out it must decide.
 * Operations still running after the verdict go on (a sent command cannot be recalled) until they settle
 * or time out, and `after.late` hears how each ended; `after.stop` aborts them instead.
 * Rejects with `signal.reason` if `signal` aborts first.
 */
export function round<T, V>(
  count: number,
  timeoutMs: number,
  signal: AbortSignal,
  op: (node: number, signal: AbortSignal) => Promise<T>,
  decide: (votes: Votes<T>) => V | undefined,
  after: AfterVerdict<T, V> = {},
): Promise<{ verdict: V; votes: Votes<T> }> {
  return new Promise((resolve, reject) => {
    const link = linkedAbort(signal)
    const votes: Array<Vote<T> | undefined> = new Array(count).fill(undefined)
    let pending = count
    let decided = false
    let verdict: V | undefined
    // The timer fires in the timers phase of the event loop, before replies already sitting in the sockets
    // are read (poll phase). After a pause of this process (GC, a busy CPU) every node would look timed out
    // although it answered in time: setImmediate runs after the poll phase, so those replies count first.
    const timer = setTimeout(
      () =>
        setImmediate(() =>
          link.abort(new NodeTimeoutError(`no reply within ${Math.round(timeoutMs)} ms (nodeTimeout)`)),
        ),
      timerDelay(timeoutMs),
    )
    const onVote = (node: number, vote: Vote<T>) => {
      votes[node] = vote
      if (--pending === 0) {
        clearTimeout(timer)
        link.dispose()
      }
      if (decided) {
        if (verdict !== undefined) after.late?.(node, vote, verdict)
        return
      }
      if (signal.aborted) {
        decided = true
        reject(signal.reason)
        return
      }
      verdict = decide(votes)
      if (verdict !== undefined) {
        decided = true
        resolve({ verdict, votes: votes.slice() })
        if (pending > 0 && after.stop?.(verdict)) link.abort(VERDICT)
      } else if (pending === 0) {
        decided = true
        reject(new Error('quorum round: every node answered but no verdict was reached (a bug in decide)'))
      }
    }
    for (let node = 0; node < count; node++) {
      let promise: Promise<T>
      try {
        promise = op(node, link.signal)
      } catch (error) {
        promise = Promise.reject(error)
      }
      promise.then(
        (value) => onVote(node, { ok: true, value }),
        (error: unknown) => onVote(node, { ok: false, error }),
      )
    }
  })
}

/** Counts of a round's votes by kind, for verdicts. */
export interface Tally {
  /** Answers that agreed (granted, renewed, released). */
  readonly yes: number
  /** Answers that refused (held by another, no longer ours). */
  readonly no: number
  /** Errors and timeouts. */
  readonly failed: number
  /** Not answered yet. */
  readonly pending: number
}

export function tally<T>(votes: Votes<T>, isYes: (value: T) => boolean): Tally {
  let yes = 0
  let no = 0
  let failed = 0
  let pending = 0
  for (const v of votes) {
    if (v === undefined) pending++
    else if (!v.ok) failed++
    else if (isYes(v.value)) yes++
    else no++
  }
  return { yes, no, failed, pending }
}

/**
 * The verdict of a round where `yes` must reach a majority `q` of `n` nodes:
 * - `yes`: a majority agreed;
 * - `no`: a majority refused (held by someone else / no longer ours);
 * - `unreachable`: so many failed that no majority can answer at all;
 * - `split`: everyone answered, a majority was reached, yet neither side has one (contention mid-way);
 * `undefined` while the pending votes could still change the verdict.
 */
export type Verdict = 'yes' | 'no' | 'unreachable' | 'split'

export function majorityVerdict(t: Tally, n: number, q: number): Verdict | undefined {
  if (t.yes >= q) return 'yes'
  if (t.failed > n - q) return 'unreachable'
  if (t.no >= q) return 'no'
  // Settled early when no pending answer could still make any of the three above true.
  if (t.yes + t.pending < q && t.no + t.pending < q && t.failed + t.pending <= n - q) return 'split'
  return undefined
}
