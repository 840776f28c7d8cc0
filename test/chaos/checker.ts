/**
 * The chaos history checker (research/reliability-anchors.md, Part C.2). It joins a run's events into
 * *holds* (an `acquire-ok` with its invoke, renewals, loss signal, release and writes, joined by `op`) and
 * checks, per key, what the library promises: no grant inside another hold's validity (A1), fences that are
 * unique and ordered (A2), a protected resource that fencing actually protects (A3), release and renewal that
 * never touch another owner's lease (A4), a loss signal on time (A5), recovery after the faults (A7) and an
 * operator's break that ends only a grant it found (A8). It also reports what a lease lock cannot promise, such as two clients that both *believe* they hold (I1).
 *
 * Intervals are half-open, `[from, to)`, on the history's clock (CLOCK_MONOTONIC ms):
 * - validity chain: `v = ok.validUntil`; each `renew-ok` (in time order) that came by `v` moves `v` to its
 *   `validUntil`; the first one that came later ends the chain (the lease had lapsed in between);
 * - `valid(h) = [ok, min(releaseInvoke, lost, v, break))`, where `break` is the invoke of an operator's break
 *   that reported h's fence broken (it ended the lease somewhere between its invoke and its answer);
 * - `believed(h) = [ok, releaseInvoke ?? lost ?? end of history)`;
 * - a *maybe-hold* is an `acquire-fail` with `definite: false`: `[invoke, invoke + invoke.ttlMs)`, because
 *   the store may have granted it without the client ever hearing.
 *
 * Grants are compared by the time the client *heard* of them (`ok`), the latest moment the store can have
 * granted them; releases by the time the client *sent* them (`release-invoke`), the earliest moment the store
 * can have applied them. Both choices lean towards missing a violation rather than inventing one.
 */
import { percentile } from '../../bench/stats.js'
import type {
  AcquireFail,
  AcquireInvoke,
  AcquireOk,
  Break,
  Fault,
  FinalRead,
  HistoryEvent,
  Lost,
  ReleaseInvoke,
  ReleaseOk,
  RenewOk,
  WriteInvoke,
  WriteResult,
} from './history.js'

export interface CheckOptions {
  /** The resource ran in fenced mode (it rejects `fence <= highest`), or unfenced (it accepts every write). */
  readonly fenced: boolean
  /** The lock ttl the workers used, in ms: the stuck-waiter bound is `ttlMs + recoveryMs`. */
  readonly ttlMs: number
  /** A7: after the last fault ends, some `acquire-ok` must come within `ttlMs + recoveryMs`. */
  readonly recoveryMs: number
  /**
   * A5: how late after `validUntil` the `lost` signal may come (the renewal timer's slack), in ms.
   * @default 250
   */
  readonly lostGraceMs?: number
  /**
   * A7 (idle): when set, the lock may lie idle — nobody holding it by the history — for at most this long
   * while an acquire is waiting. Scenarios without faults that stall holders set it: a longer idle time means
   * a hold nobody knows of (a leaked grant) kept the waiters out.
   */
  readonly idleBoundMs?: number
  /**
   * A semaphore's run: each hold is one permit of `limit`. A1 then counts grants made while `limit` other
   * holds were valid; A3 and A4, whose rules assume one holder at a time (a lost update, a release after
   * another owner's grant), do not apply and count nothing.
   */
  readonly limit?: number
  /**
   * A read-write lock's run: holds carry their mode. A1 allows a read granted inside a read's validity;
   * A2 lets readers share a fence (their epoch) and asks of a reader only a fence above every writer's
   * granted before it was invoked (of a writer, above every grant's); A4, whose rule assumes one holder at a
   * time, does not apply. Readers do not write, so A3 judges the writers' writes.
   */
  readonly rwlock?: boolean
}

/** Every hard rule: a run passes when `violationsOf` is zero for each. */
export type HardRule = 'A1' | 'A2' | 'A3' | 'A4' | 'A5' | 'A7' | 'A8'

export interface RuleReport {
  /** Hard violations of the rule; the counters beside it say which kind. */
  readonly violations: number
  /** Up to 5 violations in words: ops, clients, fences and times. */
  readonly examples: readonly string[]
  /** Up to 5 informational cases in words (potential overlaps, writes after validity, …). */
  readonly notes: readonly string[]
}

export interface ChaosReport {
  readonly fenced: boolean
  /** Acquire invocations. */
  readonly operations: number
  readonly grants: number
  /** `acquire-fail` with `definite: true`: the store refused. */
  readonly failsDefinite: number
  /** `acquire-fail` with `definite: false`: the store may have granted it (a maybe-hold). */
  readonly failsIndeterminate: number
  /** `fault-start` events per fault type. */
  readonly faultsByType: Readonly<Record<string, number>>
  /** `ok - invoke` in ms; undefined without grants. */
  readonly acquireP50: number | undefined
  readonly acquireP99: number | undefined
  /** From each `fault-end` to the next `acquire-ok` (any key), in ms; undefined without a recovered fault. */
  readonly recoveryP50: number | undefined
  readonly recoveryP99: number | undefined
  /** `violations`: ordered pairs (a, b) with b granted inside valid(a). */
  readonly a1: RuleReport & {
    readonly overlaps: number
    /** Informational: pairs (maybe-hold m, hold b) with b granted inside m's window. */
    readonly potential: number
  }
  /** `violations`: grants that fail at least one of the three checks (each grant counts once). */
  readonly a2: RuleReport & {
    /** Grants whose fence an earlier grant on the key already had. */
    readonly duplicates: number
    /** Grants b whose fence is <= the highest fence granted (ok) before b was invoked. */
    readonly orderViolations: number
    /** Grants whose fence is lower than one granted before them (ok order). */
    readonly regressions: number
  }
  /**
   * `violations`: fenced mode, accepted writes that are out of order or stale (each write counts once);
   * unfenced mode, `lostUpdates`.
   */
  readonly a3: RuleReport & {
    /** Fenced mode: accepted writes whose fence is <= one accepted before on the key. */
    readonly acceptedOutOfOrder: number
    readonly staleRejected: number
    /** Accepted writes whose fence is <= the `highest` the resource reported (the impact, in unfenced mode). */
    readonly staleAccepted: number
    /** Unfenced mode: accepted values missing from the key's `final-read`. */
    readonly lostUpdates: number
    /** Unfenced mode, informational: accepted writes whose fence is lower than one accepted before. */
    readonly outOfOrderAccepted: number
  }
  /** `violations`: `release-ok {released: true}` and `renew-ok` events that came after another owner's grant. */
  readonly a4: RuleReport & { readonly releases: number; readonly renewals: number }
  /** `violations`: `lateLost`. */
  readonly a5: RuleReport & {
    /** Holds of a live, unpaused client whose `lost` came after `validUntil + grace`, or never. */
    readonly lateLost: number
    /** Informational: `write-invoke` events of a hold at or after the end of its validity. */
    readonly writesAfterValidity: number
    /** Informational: holds whose late `lost` was excused because their client (or the harness) stalled. */
    readonly excusedByStalls: number
  }
  /** `violations`: `stuck`, plus 1 for a slow (or missing) recovery after the last fault. */
  readonly a7: RuleReport & {
    /** From the last `fault-end` to the next `acquire-ok`, in ms; undefined if none came or no fault ended. */
    readonly lastRecoveryMs: number | undefined
    readonly slowRecovery: boolean
    /** Acquire invocations never answered, by a client that was not killed, older than the bound. */
    readonly stuck: number
    /** Idle periods longer than `idleBoundMs` while an acquire waited (0 when the bound is not set). */
    readonly idle: number
  }
  /**
   * `violations`: operator breaks that reported broken a grant heard of only after the break began, while
   * an earlier grant, not reported broken, had not ended by then: the break ended that one and its successor.
   */
  readonly a8: RuleReport & {
    /** Breaks that answered `broken: true`. */
    readonly broken: number
  }
  /** Informational: holds whose believed interval overlaps another hold's on the same key. */
  readonly i1: { readonly overlappingHolds: number; readonly examples: readonly string[] }
  /** What the history lacks for a check (an `acquire-ok` without its invoke, no `final-read`, …). */
  readonly findings: readonly string[]
}

/** Enough examples to start debugging, few enough to print in a CI log. */
const MAX_EXAMPLES = 5
const DEFAULT_LOST_GRACE_MS = 250

/** Checks a chaos run's history (any order; it is sorted by `t`) against rules A1–A7 and I1. */
export function checkHistory(events: readonly HistoryEvent[], options: CheckOptions): ChaosReport {
  const history = indexHistory(events)
  const findings: string[] = []
  const holds = holdsOf(history, findings, options.rwlock === true)
  const byKey = groupByKey(holds, (h) => h.okT)
  const acquireTimes = holds.flatMap((h) => (h.invokeT === undefined ? [] : [h.okT - h.invokeT]))
  const recoveries = recoveryTimes(history)
  return {
    fenced: options.fenced,
    ...countOps(history),
    acquireP50: quantile(acquireTimes, 50),
    acquireP99: quantile(acquireTimes, 99),
    recoveryP50: quantile(recoveries, 50),
    recoveryP99: quantile(recoveries, 99),
    a1: checkA1(
      byKey,
      groupByKey(maybeHoldsOf(history, findings), (m) => m.start),
      options.limit ?? 1,
    ),
    a2: checkA2(byKey, (options.limit ?? 1) > 1 || options.rwlock === true),
    a3: options.limit === undefined ? checkA3(history, options.fenced, findings) : notApplicable(A3_NONE),
    a4: options.limit === undefined && !options.rwlock ? checkA4(byKey) : notApplicable(A4_NONE),
    a5: checkA5(holds, history, options.lostGraceMs ?? DEFAULT_LOST_GRACE_MS),
    a7: checkA7(history, options.ttlMs + options.recoveryMs, findings, options.idleBoundMs),
    a8: checkA8(byKey, history.breaks),
    i1: checkI1(byKey),
    findings,
  }
}

/** The hard-rule violation counts of a report: a run passes when every one is 0. */
export function violationsOf(report: ChaosReport): Record<HardRule, number> {
  return {
    A1: report.a1.violations,
    A2: report.a2.violations,
    A3: report.a3.violations,
    A4: report.a4.violations,
    A5: report.a5.violations,
    A7: report.a7.violations,
    A8: report.a8.violations,
  }
}

// ---------------------------------------------------------------------------------------------------------
// Indexing: one pass over the sorted events, by op and by kind.

/** What one acquire call (`op`) produced, across the worker's events. */
interface OpEvents {
  invoke?: AcquireInvoke
  ok?: AcquireOk
  fail?: AcquireFail
  renewals: RenewOk[]
  lost?: Lost
  releaseInvoke?: ReleaseInvoke
  releases: ReleaseOk[]
  writes: WriteInvoke[]
}

interface History {
  readonly ops: Map<string, OpEvents>
  /** `write-accepted` and `write-rejected`, in the order the resource decided them. */
  readonly results: WriteResult[]
  /** The last `final-read` per key. */
  readonly finalReads: Map<string, FinalRead>
  readonly faults: Fault[]
  /** Operators' breaks, by the time they answered. */
  readonly breaks: Break[]
  /** Spans in which a process could not run (`stall` events): a worker, or the harness ('harness'). */
  readonly stalls: { readonly client: string; readonly start: number; readonly end: number }[]
  /** The `t` of every `acquire-ok`, ascending: the next grant after a fault is a binary search. */
  readonly grantTimes: number[]
  /** The last event's time: what "until the end" means for open intervals. */
  readonly end: number
}

function indexHistory(events: readonly HistoryEvent[]): History {
  // Array.prototype.sort is stable, so events with the same `t` keep the order they were written in.
  const sorted = [...events].sort((a, b) => a.t - b.t)
  const history: History = {
    ops: new Map(),
    results: [],
    finalReads: new Map(),
    faults: [],
    breaks: [],
    stalls: [],
    grantTimes: [],
    end: sorted.at(-1)?.t ?? 0,
  }
  for (const event of sorted) record(history, event)
  return history
}

function record(history: History, event: HistoryEvent): void {
  switch (event.ev) {
    case 'write-accepted':
    case 'write-rejected':
      history.results.push(event)
      return
    case 'final-read':
      history.finalReads.set(event.key, event)
      return
    case 'fault-start':
    case 'fault-end':
      history.faults.push(event)
      return
    case 'stall':
      history.stalls.push({ client: event.client, start: event.t - event.ms, end: event.t })
      return
    case 'break':
      history.breaks.push(event)
      return
  }
  const op = opOf(history, event.op)
  switch (event.ev) {
    case 'acquire-invoke':
      op.invoke ??= event
      return
    case 'acquire-ok':
      op.ok ??= event
      history.grantTimes.push(event.t)
      return
    case 'acquire-fail':
      op.fail ??= event
      return
    case 'renew-ok':
      op.renewals.push(event)
      return
    case 'lost':
      op.lost ??= event
      return
    case 'release-invoke':
      op.releaseInvoke ??= event
      return
    case 'release-ok':
      op.releases.push(event)
      return
    case 'release-fail':
      return
    case 'write-invoke':
      op.writes.push(event)
      return
  }
}

function opOf(history: History, op: string): OpEvents {
  let entry = history.ops.get(op)
  if (entry === undefined) {
    entry = { renewals: [], releases: [], writes: [] }
    history.ops.set(op, entry)
  }
  return entry
}

function countOps(history: History) {
  let operations = 0
  let grants = 0
  let failsDefinite = 0
  let failsIndeterminate = 0
  for (const op of history.ops.values()) {
    if (op.invoke) operations++
    if (op.ok) grants++
    if (op.fail?.definite === true) failsDefinite++
    if (op.fail?.definite === false) failsIndeterminate++
  }
  const faultsByType: Record<string, number> = {}
  for (const f of history.faults) {
    if (f.ev === 'fault-start') faultsByType[f.type] = (faultsByType[f.type] ?? 0) + 1
  }
  return { operations, grants, failsDefinite, failsIndeterminate, faultsByType }
}

// ---------------------------------------------------------------------------------------------------------
// Holds and maybe-holds.

interface Hold {
  readonly op: string
  readonly key: string
  readonly client: string
  /** The grant's owner: unique per grant, what a break names it by. */
  readonly owner: string
  readonly fence: bigint
  readonly fenceText: string
  readonly invokeT: number | undefined
  readonly okT: number
  /** The end of the validity chain (`v`), before release or loss cut it short. */
  readonly validUntil: number
  /** `min(releaseInvoke, lost, v)`. */
  readonly validEnd: number
  readonly believedEnd: number
  readonly releaseInvokeT: number | undefined
  readonly lostT: number | undefined
  readonly renewals: readonly RenewOk[]
  readonly releases: readonly ReleaseOk[]
  readonly writes: readonly WriteInvoke[]
  /** A read-write lock's grant: its mode. */
  readonly mode: 'read' | 'write' | undefined
}

/** Two holds a read-write lock admits together: both readers. */
const shared = (a: Hold, b: Hold): boolean => a.mode === 'read' && b.mode === 'read'

interface MaybeHold {
  readonly op: string
  readonly key: string
  readonly client: string
  readonly start: number
  readonly end: number
}

/**
 * The fault type of a worker killed by a host reboot (the harness's `replaceAll`): its lease ends with the
 * boot, unlike a process killed on a host that lives on (`kill-holder`), whose lease runs to its end.
 */
export const REBOOT_KILL = 'killed-by-reboot'

/**
 * The fault type of a holder killed on a store whose leases end with their processes (the file backend:
 * the `process-lease` feature): its lease ends with it, as with a reboot, though the host lives on.
 */
export const LEASE_KILL = 'killed-with-its-lease'

/** A kill that ends the killed process's leases at once. */
const endsLeases = (type: string) => type === REBOOT_KILL || type === LEASE_KILL

/** The holds of `history`; with their modes on a read-write lock's run (`rwlock`), else none. */
function holdsOf(history: History, findings: string[], rwlock = false): Hold[] {
  const holds: Hold[] = []
  for (const [op, events] of history.ops) {
    const ok = events.ok
    if (ok === undefined) continue
    if (events.invoke === undefined)
      findings.push(`${op}: acquire-ok without acquire-invoke (A2 order skipped)`)
    const validUntil = validityChain(ok.validUntil, events.renewals)
    const releaseInvokeT = events.releaseInvoke?.t
    const lostT = events.lost?.t
    // A host reboot (REBOOT_KILL) ends its processes' leases with them: nothing of theirs is valid after.
    const rebootT = history.faults.find(
      (f) => f.ev === 'fault-start' && endsLeases(f.type) && f.target === ok.client && f.t >= ok.t,
    )?.t
    // A break that reports this grant broken ended it between its invoke and its answer: at the invoke at
    // the earliest, and not before its client heard of it (a break that ended some other grant does not
    // count here: A8 judges it).
    const breakOf = history.breaks.find((b) => b.broken === true && b.key === ok.key && reports(b, ok))
    const brokenT = breakOf && Math.max(breakOf.invokedAt, ok.t)
    holds.push({
      op,
      key: ok.key,
      client: ok.client,
      owner: ok.owner,
      fence: fenceOf(ok.fence, op),
      fenceText: ok.fence,
      invokeT: events.invoke?.t,
      okT: ok.t,
      validUntil,
      validEnd: Math.min(
        releaseInvokeT ?? Infinity,
        lostT ?? Infinity,
        rebootT ?? Infinity,
        brokenT ?? Infinity,
        validUntil,
      ),
      believedEnd: releaseInvokeT ?? lostT ?? history.end,
      releaseInvokeT,
      lostT,
      renewals: events.renewals,
      releases: events.releases,
      writes: events.writes,
      mode: rwlock ? ok.mode : undefined,
    })
  }
  return holds
}

/** A renewal extends the lease only if it came while the lease still held; once it lapsed, it stays lapsed. */
function validityChain(validUntil: number, renewals: readonly RenewOk[]): number {
  let v = validUntil
  for (const renewal of renewals) {
    if (renewal.t > v) break
    v = renewal.validUntil
  }
  return v
}

function maybeHoldsOf(history: History, findings: string[]): MaybeHold[] {
  const maybe: MaybeHold[] = []
  for (const [op, { invoke, fail }] of history.ops) {
    if (fail?.definite !== false) continue
    if (invoke === undefined) {
      findings.push(`${op}: indeterminate acquire-fail without acquire-invoke (no maybe-hold counted)`)
      continue
    }
    // The store applies the invoke's own ttl, so that is how long a silent grant would last.
    maybe.push({ op, key: invoke.key, client: invoke.client, start: invoke.t, end: invoke.t + invoke.ttlMs })
  }
  return maybe
}

/** Fences are decimal strings so that they survive JSON; compare them as BigInt, never as text or float. */
function fenceOf(text: string, where: string): bigint {
  try {
    return BigInt(text)
  } catch (cause) {
    throw new Error(`${where}: expected the fence to be a decimal string, got ${JSON.stringify(text)}`, {
      cause,
    })
  }
}

/** Per key, sorted by `startOf` (the grant, or a maybe-hold's invoke): the order every rule scans in. */
function groupByKey<T extends { readonly key: string }>(
  items: readonly T[],
  startOf: (item: T) => number,
): Map<string, T[]> {
  const byKey = new Map<string, T[]>()
  for (const item of items) {
    const list = byKey.get(item.key)
    if (list) list.push(item)
    else byKey.set(item.key, [item])
  }
  for (const list of byKey.values()) list.sort((a, b) => startOf(a) - startOf(b))
  return byKey
}

/** The index of the first hold granted at or after `t` (holds sorted by `okT`). */
function firstGrantFrom(holds: readonly Hold[], t: number): number {
  let lo = 0
  let hi = holds.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (holds[mid]!.okT < t) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** Holds granted in `[from, to)`. */
function grantsIn(holds: readonly Hold[], from: number, to: number): Hold[] {
  const found: Hold[] = []
  for (let i = firstGrantFrom(holds, from); i < holds.length && holds[i]!.okT < to; i++) found.push(holds[i]!)
  return found
}

/** The first hold granted strictly inside `(from, to)`, if any. */
function grantStrictlyIn(holds: readonly Hold[], from: number, to: number): Hold | undefined {
  return grantsIn(holds, from, to).find((h) => h.okT > from)
}

function note(list: string[], text: string): void {
  if (list.length < MAX_EXAMPLES) list.push(text)
}

function at(t: number): string {
  return `t=${Number(t.toFixed(1))}`
}

function holdText(h: Hold): string {
  return `${h.op} (${h.client}, fence ${h.fenceText}, granted ${at(h.okT)})`
}

function quantile(samples: number[], p: number): number | undefined {
  return samples.length === 0 ? undefined : percentile(samples, p)
}

// ---------------------------------------------------------------------------------------------------------
// The rules.

/**
 * A1: no grant inside another hold's validity (of a semaphore: no grant while `limit` other holds are
 * valid); a grant inside a maybe-hold's window is only *potential*.
 */
function checkA1(
  byKey: Map<string, Hold[]>,
  maybeByKey: Map<string, MaybeHold[]>,
  limit: number,
): ChaosReport['a1'] {
  let overlaps = 0
  let potential = 0
  const examples: string[] = []
  const notes: string[] = []
  for (const [key, holds] of byKey) {
    if (limit > 1) {
      for (const b of holds) {
        const valid = holds.filter((a) => a !== b && a.okT <= b.okT && b.okT < a.validEnd)
        if (valid.length < limit) continue
        overlaps++
        note(
          examples,
          `${key}: ${holdText(b)} granted while ${valid.length} holds of ${limit} permits were valid: ` +
            valid.map(holdText).join('; '),
        )
      }
      continue
    }
    for (const a of holds) {
      for (const b of grantsIn(holds, a.okT, a.validEnd)) {
        if (b === a || shared(a, b)) continue
        overlaps++
        note(
          examples,
          `${key}: ${holdText(b)} inside the validity of ${holdText(a)}, until ${at(a.validEnd)}`,
        )
      }
    }
    for (const m of maybeByKey.get(key) ?? []) {
      for (const b of grantsIn(holds, m.start, m.end)) {
        potential++
        note(notes, `${key}: ${holdText(b)} inside the maybe-hold of ${m.op} (${m.client}, ${at(m.start)})`)
      }
    }
  }
  return { violations: overlaps, overlaps, potential, examples, notes }
}

/** A2: fences unique per key, ordered by real time (a.ok < b.invoke ⇒ a < b), never lower than one before. */
function checkA2(byKey: Map<string, Hold[]>, concurrent: boolean): ChaosReport['a2'] {
  const counts = { violations: 0, duplicates: 0, orderViolations: 0, regressions: 0 }
  const examples: string[] = []
  const notes: string[] = []
  for (const [key, holds] of byKey) {
    const highestUpTo = runningHighest(holds)
    const granted = new Map<bigint, Hold>()
    for (const [i, b] of holds.entries()) {
      const first = granted.get(b.fence)
      // Readers of one read epoch share its fence.
      const twin = first && !shared(first, b) ? first : undefined
      const beforeInvoke = b.invokeT === undefined ? undefined : highestBefore(holds, highestUpTo, b.invokeT)
      const outranked =
        beforeInvoke !== undefined &&
        (beforeInvoke.fence > b.fence || (beforeInvoke.fence === b.fence && !shared(beforeInvoke, b)))
          ? beforeInvoke
          : undefined
      const before = i > 0 ? highestUpTo[i - 1] : undefined
      const regressed = before !== undefined && b.fence < before.fence ? before : undefined
      // Grants made at nearly the same time (a semaphore's) can be heard in either order: a lower number
      // heard later is no regression unless it was asked for after the higher was heard (`outranked`).
      const regression = concurrent ? undefined : regressed
      if (concurrent && regressed && !twin && !outranked) {
        note(notes, `${key}: ${holdText(b)} heard after ${holdText(regressed)}, granted alongside it`)
      }
      if (twin) counts.duplicates++
      if (outranked) counts.orderViolations++
      if (regression) counts.regressions++
      if (twin || outranked || regression) {
        counts.violations++
        const why = [
          twin && `duplicates ${holdText(twin)}`,
          outranked && `was invoked after ${holdText(outranked)}`,
          regression && `regresses below ${holdText(regression)}`,
        ]
        note(examples, `${key}: ${holdText(b)} ${why.filter(Boolean).join('; ')}`)
      }
      if (!first) granted.set(b.fence, b)
    }
  }
  return { ...counts, examples, notes }
}

/** `result[i]`: the hold with the highest fence among `holds[0..i]` (the earliest one on ties). */
function runningHighest(holds: readonly Hold[]): Hold[] {
  const result: Hold[] = []
  for (const h of holds) {
    const best = result.at(-1)
    result.push(best && best.fence >= h.fence ? best : h)
  }
  return result
}

/** The highest-fenced hold granted strictly before `t`. */
function highestBefore(holds: readonly Hold[], highestUpTo: readonly Hold[], t: number): Hold | undefined {
  const count = firstGrantFrom(holds, t)
  return count > 0 ? highestUpTo[count - 1] : undefined
}

const A3_NONE = {
  acceptedOutOfOrder: 0,
  staleRejected: 0,
  staleAccepted: 0,
  lostUpdates: 0,
  outOfOrderAccepted: 0,
}
const A4_NONE = { releases: 0, renewals: 0 }

/** A rule that does not apply to the run (a semaphore's several holders): nothing counted, and why. */
function notApplicable<T extends object>(counts: T): T & RuleReport {
  const why = 'not applicable: several holders are valid at once (a semaphore)'
  return { ...counts, violations: 0, examples: [], notes: [why] }
}

/** A3: the resource's view. Fenced mode shows the protection, unfenced mode the impact (lost updates). */
function checkA3(history: History, fenced: boolean, findings: string[]): ChaosReport['a3'] {
  const counts = {
    violations: 0,
    acceptedOutOfOrder: 0,
    staleRejected: 0,
    staleAccepted: 0,
    lostUpdates: 0,
    outOfOrderAccepted: 0,
  }
  const examples: string[] = []
  const notes: string[] = []
  const highestAccepted = new Map<string, WriteResult>()
  for (const w of history.results) {
    if (w.ev === 'write-rejected') {
      counts.staleRejected++
      continue
    }
    const fence = fenceOf(w.fence, w.op)
    const previous = highestAccepted.get(w.key)
    const previousFence = previous && fenceOf(previous.fence, previous.op)
    const stale = fence <= fenceOf(w.highest, w.op)
    if (stale) counts.staleAccepted++
    const text = `${w.key}: ${w.op} write ${w.value} with fence ${w.fence} accepted ${at(w.t)}`
    if (fenced) {
      // The resource rejects `fence <= highest`, so accepted fences must strictly increase.
      const outOfOrder = previousFence !== undefined && fence <= previousFence
      if (outOfOrder) counts.acceptedOutOfOrder++
      if (outOfOrder || stale) {
        counts.violations++
        note(
          examples,
          `${text}; highest was ${w.highest}, highest accepted before ${previous?.fence ?? 'none'}`,
        )
      }
    } else if (previousFence !== undefined && fence < previousFence) {
      counts.outOfOrderAccepted++
      note(notes, `${text} after fence ${previous?.fence} was accepted`)
    }
    if (previousFence === undefined || fence > previousFence) highestAccepted.set(w.key, w)
  }
  if (!fenced) {
    counts.lostUpdates = lostUpdates(history, examples, findings)
    counts.violations = counts.lostUpdates
  }
  return { ...counts, examples, notes }
}

/** Set-full: every value the resource acknowledged must be in its final state. */
function lostUpdates(history: History, examples: string[], findings: string[]): number {
  let lost = 0
  const unread = new Set<string>()
  for (const w of history.results) {
    if (w.ev !== 'write-accepted') continue
    const final = history.finalReads.get(w.key)
    if (final === undefined) {
      unread.add(w.key)
      continue
    }
    if (final.values.includes(w.value)) continue
    lost++
    note(examples, `${w.key}: ${w.op} value ${w.value}, fence ${w.fence}, accepted ${at(w.t)}, lost`)
  }
  for (const key of unread)
    findings.push(`${key}: accepted writes but no final-read (lost updates not checked)`)
  return lost
}

/**
 * A4: a release or renewal that succeeded after another owner was granted touched that owner's lease. The
 * history has no `renew-invoke`, so a renewal stands at its reply: one delayed by over a ttl may be misjudged.
 */
function checkA4(byKey: Map<string, Hold[]>): ChaosReport['a4'] {
  let releases = 0
  let renewals = 0
  const examples: string[] = []
  for (const [key, holds] of byKey) {
    for (const a of holds) {
      for (const r of a.releases) {
        if (!r.released) continue
        const sentAt = a.releaseInvokeT ?? r.t
        const b = grantStrictlyIn(holds, a.okT, sentAt)
        if (b === undefined) continue
        releases++
        note(examples, `${key}: ${holdText(a)} released (sent ${at(sentAt)}) after ${holdText(b)}`)
      }
      for (const r of a.renewals) {
        const b = grantStrictlyIn(holds, a.okT, r.t)
        if (b === undefined) continue
        renewals++
        note(examples, `${key}: ${holdText(a)} renewed ${at(r.t)} after ${holdText(b)}`)
      }
    }
  }
  return { violations: releases + renewals, releases, renewals, examples, notes: [] }
}

/** A fault's reach in time; a fault that never ended (a killed worker) lasts to the end of the history. */
interface FaultSpan {
  readonly target: string
  readonly start: number
  readonly end: number
}

function faultSpans(history: History): FaultSpan[] {
  const open: Fault[] = []
  const spans: FaultSpan[] = []
  for (const f of history.faults) {
    if (f.ev === 'fault-start') {
      open.push(f)
      continue
    }
    const i = open.findIndex((s) => s.type === f.type && s.target === f.target)
    if (i < 0) continue
    const [start] = open.splice(i, 1)
    spans.push({ target: f.target, start: start!.t, end: f.t })
  }
  for (const s of open) spans.push({ target: s.target, start: s.t, end: Infinity })
  return spans
}

/**
 * A5: a client that lives on must hear of the loss by `validUntil + grace`. A paused or killed client (any
 * fault aimed at it while the deadline ran) cannot, and a released hold has nothing left to lose. Nor can a
 * client whose process stalled (a `stall` it reported: the machine gave it no CPU) between its grant and
 * the deadline, and a stall of the harness makes every stamp in it late: both move the deadline to the
 * stall's end plus the grace (the excused holds are counted in `excusedByStalls`); a loss still unheard
 * by then is a violation.
 */
function checkA5(holds: readonly Hold[], history: History, graceMs: number): ChaosReport['a5'] {
  const spans = faultSpans(history)
  let lateLost = 0
  let writesAfterValidity = 0
  let excusedByStalls = 0
  const examples: string[] = []
  const notes: string[] = []
  for (const h of holds) {
    // The library cannot signal before it returned the lock, hence the max with the grant.
    const deadline = Math.max(h.okT, h.validUntil) + graceMs
    const released = h.releaseInvokeT !== undefined && h.releaseInvokeT < h.validUntil
    const faulted = spans.some((f) => f.target === h.client && f.start <= deadline && f.end >= h.okT)
    // A missing signal counts only once the history has run past the deadline.
    const lateBy = (d: number) => (h.lostT === undefined ? history.end > d : h.lostT > d)
    // A stall between the grant and the deadline postpones the deadline to the stall's end plus the grace
    // (chained stalls too): the client could not run, or its words could not be stamped, until then.
    let due = deadline
    for (const s of history.stalls) {
      if ((s.client === h.client || s.client === 'harness') && s.start <= due && s.end >= h.okT) {
        due = Math.max(due, s.end + graceMs)
      }
    }
    if (!released && !faulted && lateBy(deadline) && !lateBy(due)) excusedByStalls++
    if (!released && !faulted && lateBy(due)) {
      lateLost++
      const heard = h.lostT === undefined ? 'never' : at(h.lostT)
      note(examples, `${h.key}: ${holdText(h)} valid until ${at(h.validUntil)}, lost heard ${heard}`)
    }
    for (const w of h.writes) {
      if (w.t < h.validEnd) continue
      writesAfterValidity++
      note(notes, `${h.key}: ${holdText(h)} wrote ${w.value} ${at(w.t)}, validity ended ${at(h.validEnd)}`)
    }
  }
  return { violations: lateLost, lateLost, writesAfterValidity, excusedByStalls, examples, notes }
}

/** From every `fault-end` to the next grant on any key: how long the system took to serve again. */
function recoveryTimes(history: History): number[] {
  const times: number[] = []
  for (const f of history.faults) {
    if (f.ev !== 'fault-end') continue
    const next = nextGrant(history, f.t)
    if (next !== undefined) times.push(next - f.t)
  }
  return times
}

function nextGrant(history: History, t: number): number | undefined {
  return history.grantTimes.find((g) => g >= t)
}

/**
 * A7: after the last fault, a grant within the bound; and no waiter left unanswered past the bound. Both
 * count a waiter's time only while its process could run: a stall it reported (the machine gave it no CPU)
 * is no evidence of a waiter the library forgot, while a waiter truly forgotten sits idle, never stalled,
 * and its time counts in full.
 */
function checkA7(
  history: History,
  boundMs: number,
  findings: string[],
  idleBoundMs: number | undefined,
): ChaosReport['a7'] {
  const examples: string[] = []
  const recovery = lastRecovery(history, boundMs, examples, findings)
  const stuck = stuckWaiters(history, boundMs, examples)
  const idle = idleBoundMs === undefined ? 0 : idleWhileWaited(history, idleBoundMs, examples)
  return {
    violations: stuck + idle + (recovery.slow ? 1 : 0),
    lastRecoveryMs: recovery.ms,
    slowRecovery: recovery.slow,
    stuck,
    idle,
    examples,
    notes: [],
  }
}

function lastRecovery(history: History, boundMs: number, examples: string[], findings: string[]) {
  const none = { ms: undefined, slow: false }
  if (!history.faults.some((f) => f.ev === 'fault-start')) return none
  const lastEnd = history.faults.findLast((f) => f.ev === 'fault-end')
  if (lastEnd === undefined) {
    findings.push('faults started but none ended (A7 recovery not checked)')
    return none
  }
  const next = nextGrant(history, lastEnd.t)
  const waited = longestRunnableWait(history, lastEnd.t, next ?? history.end)
  if (next !== undefined) {
    const ms = next - lastEnd.t
    const slow = waited !== undefined && waited.ms > boundMs
    if (slow) {
      note(
        examples,
        `first grant ${ms} ms after the last fault ended (${at(lastEnd.t)}); ` +
          `${waited.client} waited ${Math.round(waited.ms)} ms of it, not stalled`,
      )
    }
    return { ms, slow }
  }
  if (waited === undefined) return none
  // Judge a missing grant only once the history ran past the bound: a short tail is the harness's fault.
  if (history.end - lastEnd.t <= boundMs) {
    findings.push(`history ends ${history.end - lastEnd.t} ms after the last fault, within the A7 bound`)
    return none
  }
  if (waited.ms <= boundMs) return none
  note(examples, `no grant after the last fault ended (${at(lastEnd.t)}), though clients asked`)
  return { ms: undefined, slow: true }
}

/**
 * Of the clients waiting in [from, to] (an acquire invoked and not yet answered), the one that waited the
 * longest there while able to run: from its first such acquire (or `from`) to `to` or its kill, less its
 * stalls. Undefined when nobody waited.
 */
function longestRunnableWait(history: History, from: number, to: number) {
  const firstWait = new Map<string, number>()
  for (const { invoke, ok, fail } of history.ops.values()) {
    if (invoke === undefined || invoke.t > to) continue
    const answered = ok?.t ?? fail?.t
    if (answered !== undefined && answered < from) continue
    const start = Math.max(from, invoke.t)
    firstWait.set(invoke.client, Math.min(start, firstWait.get(invoke.client) ?? start))
  }
  let longest: { client: string; ms: number } | undefined
  for (const [client, start] of firstWait) {
    const ms = runnableMs(history, client, start, Math.min(to, killedAfter(history, client, start)))
    if (longest === undefined || ms > longest.ms) longest = { client, ms }
  }
  return longest
}

/** When `client` was first killed at or after `t` (by the nemesis or at the run's end); Infinity if never. */
function killedAfter(history: History, client: string, t: number): number {
  const kill = history.faults.find(
    (f) =>
      f.ev === 'fault-start' &&
      (f.type === 'kill-holder' || f.type === 'kill-at-end' || endsLeases(f.type)) &&
      f.target === client &&
      f.t >= t,
  )
  return kill?.t ?? Number.POSITIVE_INFINITY
}

/** The time in [from, to] that `client`'s process could run: the span less the stalls it reported. */
function runnableMs(history: History, client: string, from: number, to: number): number {
  let stalled = 0
  let covered = from
  const stalls = history.stalls.filter((s) => s.client === client).sort((a, b) => a.start - b.start)
  for (const s of stalls) {
    const start = Math.max(s.start, covered)
    const end = Math.min(s.end, to)
    if (end > start) stalled += end - start
    covered = Math.max(covered, s.end)
  }
  return Math.max(0, to - from - stalled)
}

/**
 * Acquires never answered whose client could run for longer than the bound after it asked, until the end
 * or its kill at the end; a client the nemesis killed after it asked owes no answer.
 */
function stuckWaiters(history: History, boundMs: number, examples: string[]): number {
  let stuck = 0
  for (const [op, { invoke, ok, fail }] of history.ops) {
    if (invoke === undefined || ok || fail) continue
    const killed = history.faults.some(
      (f) =>
        f.ev === 'fault-start' &&
        (f.type === 'kill-holder' || endsLeases(f.type)) &&
        f.target === invoke.client &&
        f.t >= invoke.t,
    )
    if (killed) continue
    const until = Math.min(history.end, killedAfter(history, invoke.client, invoke.t))
    if (runnableMs(history, invoke.client, invoke.t, until) <= boundMs) continue
    stuck++
    note(examples, `${invoke.key}: ${op} (${invoke.client}) invoked ${at(invoke.t)}, never answered`)
  }
  return stuck
}

/**
 * A8: a break ends only a grant its first look found. It reports the fence of the grant it ended; a grant
 * heard of before the break began is one it may have found. One heard of later may be too: the holder
 * released (or its lease ran out) as the break began, the next waiter was granted, and the break's first
 * look found that. What no correct break shows is a grant heard of after it began reported broken while
 * an earlier grant, not reported broken, had not ended on its own (released, lost, lapsed, killed) by then:
 * the break silently ended that one, a waiter was granted on top, and the break ended the waiter's too.
 * (Its grant also counts in A1, inside the earlier one's validity; A8 says the break did it.) A fence
 * nobody heard of (an acquire that timed out may have been granted) is a note, not a violation.
 */
function checkA8(byKey: Map<string, Hold[]>, breaks: readonly Break[]): ChaosReport['a8'] {
  let violations = 0
  let broken = 0
  const examples: string[] = []
  const notes: string[] = []
  for (const br of breaks) {
    if (br.broken !== true || br.fence === undefined) continue
    broken++
    const holds = byKey.get(br.key) ?? []
    const text = `${br.key}: break invoked ${at(br.invokedAt)}, answered ${at(br.t)}, broke fence ${br.fence}`
    const reported = holds.find((h) => reports(br, h))
    if (reported === undefined) {
      note(notes, `${text}: no client heard of that grant`)
      continue
    }
    if (reported.okT <= br.invokedAt) continue
    const live = holds.find((a) => a.okT < reported.okT && a.validEnd > reported.okT)
    if (live === undefined) {
      note(notes, `${text}: ${holdText(reported)} granted after it began, its predecessor had ended`)
      continue
    }
    violations++
    note(
      examples,
      `${text}: ${holdText(reported)} granted after it began, while ${holdText(live)} had not ended ` +
        `(until ${at(live.validEnd)})`,
    )
  }
  return { violations, broken, examples, notes }
}

/**
 * Whether a break reports this grant: by its owner, unique per grant. Not by its fence: a quorum's break
 * reports the token the nodes show, whose node index may differ from the holder's. By the fence only when
 * the break could not read an owner.
 */
function reports(br: Break, grant: { readonly owner: string; readonly fence: string | bigint }): boolean {
  return br.owner ? br.owner === grant.owner : br.fence === String(grant.fence)
}

/** I1: two clients that both believe they hold. Expected under pauses for a lease lock; fencing covers it. */
function checkI1(byKey: Map<string, Hold[]>): ChaosReport['i1'] {
  const overlapping = new Set<Hold>()
  const examples: string[] = []
  for (const [key, holds] of byKey) {
    // Sorted by start, so the later-starting b overlaps a exactly when it starts before a's end.
    for (const [i, a] of holds.entries()) {
      for (let j = i + 1; j < holds.length && holds[j]!.okT < a.believedEnd; j++) {
        const b = holds[j]!
        if (b.believedEnd <= b.okT) continue
        overlapping.add(a).add(b)
        note(examples, `${key}: ${holdText(a)} believed until ${at(a.believedEnd)}, while ${holdText(b)}`)
      }
    }
  }
  return { overlappingHolds: overlapping.size, examples }
}

/**
 * Periods longer than `boundMs`, after the first grant, in which no hold was open by the history (granted
 * and not yet released, failed to release, or lost) while some acquire was waiting (invoked, not yet
 * answered). Keys are not told
 * apart: the scenarios that set the bound use one key.
 */
function idleWhileWaited(history: History, boundMs: number, examples: string[]): number {
  // +1 / -1 steps of "holds open" and "acquires waiting", swept in time order.
  const steps: Array<{ t: number; holds: number; waits: number }> = []
  for (const op of history.ops.values()) {
    if (op.invoke) {
      steps.push({ t: op.invoke.t, holds: 0, waits: 1 })
      const answered = op.ok?.t ?? op.fail?.t
      if (answered !== undefined) steps.push({ t: answered, holds: 0, waits: -1 })
    }
    if (op.ok) {
      steps.push({ t: op.ok.t, holds: 1, waits: 0 })
      const ended = op.releases.at(-1)?.t ?? op.lost?.t ?? op.releaseInvoke?.t
      steps.push({ t: ended ?? history.end, holds: -1, waits: 0 })
    }
  }
  steps.sort((a, b) => a.t - b.t || b.holds - a.holds)
  // From the first grant on: before it, the store may still be warming up (a Redlock node waits out its
  // restart delay after a start, an etcd cluster elects a leader), which is not a lock left behind.
  const firstGrant = history.grantTimes[0] ?? Number.POSITIVE_INFINITY
  let holds = 0
  let waits = 0
  let idleSince: number | undefined
  let count = 0
  for (const step of steps) {
    holds += step.holds
    waits += step.waits
    const idle = holds === 0 && waits > 0 && step.t >= firstGrant
    if (idle && idleSince === undefined) idleSince = step.t
    if (!idle && idleSince !== undefined) {
      if (step.t - idleSince > boundMs) {
        count++
        note(
          examples,
          `the lock lay idle ${Math.round(step.t - idleSince)} ms from ${at(idleSince)} while acquires waited`,
        )
      }
      idleSince = undefined
    }
  }
  return count
}
