/**
 * The vocabulary of admission (admission.ts has the catch-up and why it keeps fences increasing): what a
 * catch-up needs of a node, a node's state as the STATE script reads it, whether that state is admitted,
 * why a catch-up did not admit, and the small helpers the catch-up and the bootstrap share.
 */
import { within } from '../../core/within.js'

/** How long one step of a catch-up may wait for one node (or one page of its counters). */
export const STEP_MS = 2000

/** A node's admission state, as `fencelock doctor` reports it. */
export type AdmissionState = 'admitted' | 'catching-up' | 'bootstrap'

/** Why a catch-up did not admit its node; `state` says which of the two waits it is. */
export class AdmissionError extends Error {
  override name = 'AdmissionError'
  constructor(
    readonly state: Exclude<AdmissionState, 'admitted'>,
    message: string,
    /** Another client changed the nodes meanwhile: trying again at once may well succeed. */
    readonly raced = false,
    /** Too early: try again in this many ms (not sooner). */
    readonly retryInMs?: number,
  ) {
    super(message)
  }
}

/** Why a node waits before its catch-up, for messages. */
export function tooEarly(delayMs: number, leftMs: number): string {
  return `restarted: caught up and voting in ~${Math.ceil(leftMs / 1000)} s (restartDelay ${Math.ceil(delayMs / 1000)} s)`
}

/**
 * What the STATE script returns: the server process's run_id, the node's admission marker, and the run_id
 * a bootstrap admitted as part of a fresh set (if any).
 */
export interface NodeState {
  readonly runId: string
  readonly marker: string | null
  readonly fresh: string | null
}

export const isAdmitted = (s: NodeState | undefined): boolean => s !== undefined && s.marker === s.runId

/** Admitted by the bootstrap of a fresh set: it votes without the delayed restart (admission.ts). */
export const isFresh = (s: NodeState | undefined): boolean => isAdmitted(s) && s!.fresh === s!.runId

/** What a catch-up needs of a node (node.ts's RedlockNode). Each call is bounded by STEP_MS per round trip. */
export interface CatchUpNode {
  /** host:port, for messages. */
  readonly address: string
  /** The run_id of the server process its connection was checked against. */
  readonly runId: string | undefined
  /** How long that server has been up, at least. */
  readonly upMs: number
  /** This client has seen the set in use on this node (a marker, or its server restarted). */
  readonly sawUse: boolean
  /** The run_id and the admission marker, in one atomic step (the STATE script). */
  readState(signal: AbortSignal): Promise<NodeState>
  /** The node's counter and every name's fence key under the prefix. */
  readFences(closed: AbortSignal): Promise<Map<string, bigint>>
  /** The name of one fence counter under the prefix (the node's own first), if there is any. */
  firstFence(closed: AbortSignal): Promise<string | undefined>
  /** Raises the node's counter to the largest of `values` (never lowers it). */
  raiseFences(values: ReadonlyMap<string, bigint>, closed: AbortSignal): Promise<void>
  /**
   * Writes `runId` as the marker if, and only if, the server still runs as `runId` (the ADMIT script); as
   * the fresh marker too when `fresh` (a bootstrap).
   */
  admit(runId: string, fresh: boolean, signal: AbortSignal): Promise<boolean>
  /** Writes IN_USE as the marker if there is none: a trace that the set is in use (never admits). */
  markInUse(signal: AbortSignal): Promise<void>
  /** Tells the node that a catch-up (or, `fresh`, a bootstrap) admitted `runId`. */
  admitted(runId: string, fresh: boolean): void
}

/** What steps 0 and 1 of a catch-up found, which the rest works from. */
export interface Found {
  /** The node being caught up, and the others. */
  readonly x: CatchUpNode
  readonly others: readonly CatchUpNode[]
  readonly n: number
  readonly q: number
  /** X's state at step 0. */
  readonly own: NodeState
  /** The others' states at step 1 (an Error: unreachable; undefined: no answer before the verdict). */
  readonly first: ReadonlyArray<NodeState | Error | undefined>
  /** Aborts when the backend closes. */
  readonly closed: AbortSignal
}

/** host:port list, for messages. */
export const addresses = (nodes: ReadonlyArray<{ readonly address: string }>) =>
  nodes.map((o) => o.address).join(', ')

/** One step of a catch-up on one node: bounded by STEP_MS, stopped when the backend closes. */
export const step = <T>(closed: AbortSignal, fn: (s: AbortSignal) => Promise<T>): Promise<T> =>
  within(STEP_MS, closed, fn)

/** Lists the others' states for a message: "127.0.0.1:6380 admitted, 127.0.0.1:6381 unreachable, …". */
export function summary(
  others: ReadonlyArray<{ readonly address: string }>,
  states: ReadonlyArray<NodeState | Error | undefined>,
) {
  return others
    .map((o, i) => {
      const s = states[i]
      const what =
        s === undefined || s instanceof Error
          ? 'unreachable'
          : isAdmitted(s)
            ? 'admitted'
            : s.marker === null
              ? 'empty'
              : 'not admitted'
      return `${o.address} ${what}`
    })
    .join(', ')
}

export const stateOf = (s: NodeState | Error | undefined): NodeState | undefined =>
  s === undefined || s instanceof Error ? undefined : s

export const asError = (e: unknown): Error =>
  e instanceof Error ? e : new Error(String((e as Error)?.message ?? e))
