import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import {
  type CheckOptions,
  checkHistory,
  LEASE_KILL,
  REBOOT_KILL,
  type RuleReport,
  violationsOf,
} from './checker.js'
import type { Fault, HistoryEvent, WriteInvoke, WriteResult } from './history.js'

// Hand-made histories, small enough to count by hand: every assertion is an exact number.
const TTL = 1000
const FENCED: CheckOptions = { fenced: true, ttlMs: TTL, recoveryMs: 500 }
const UNFENCED: CheckOptions = { ...FENCED, fenced: false }

const invoke = (t: number, client: string, op: string, key = 'k'): HistoryEvent => ({
  ev: 'acquire-invoke',
  t,
  client,
  op,
  key,
  ttlMs: TTL,
})
const ok = (
  t: number,
  client: string,
  op: string,
  fence: string,
  validUntil: number,
  key = 'k',
): HistoryEvent => ({
  ev: 'acquire-ok',
  t,
  client,
  op,
  key,
  owner: `${op}-owner`,
  fence,
  validUntil,
})
const fail = (t: number, client: string, op: string, definite: boolean, key = 'k'): HistoryEvent => ({
  ev: 'acquire-fail',
  t,
  client,
  op,
  key,
  definite,
  reason: definite ? 'held' : 'timeout',
})
const renew = (t: number, client: string, op: string, validUntil: number): HistoryEvent => ({
  ev: 'renew-ok',
  t,
  client,
  op,
  validUntil,
})
const lost = (t: number, client: string, op: string): HistoryEvent => ({
  ev: 'lost',
  t,
  client,
  op,
  reason: 'expired',
})
const releaseInvoke = (t: number, client: string, op: string): HistoryEvent => ({
  ev: 'release-invoke',
  t,
  client,
  op,
})
const releaseOk = (t: number, client: string, op: string, released = true): HistoryEvent => ({
  ev: 'release-ok',
  t,
  client,
  op,
  released,
})
const finalRead = (t: number, key: string, values: string[]): HistoryEvent => ({
  ev: 'final-read',
  t,
  client: 'resource',
  key,
  values,
})
/** An operator's break invoked at `invokedAt` that answered at `t`, reporting `fence` (broken or not). */
const breakEvent = (
  invokedAt: number,
  t: number,
  broken: boolean,
  reported?: { op: string; fence: string },
): HistoryEvent => ({
  ev: 'break',
  t,
  client: 'nemesis',
  key: 'k',
  invokedAt,
  broken,
  ...(reported === undefined ? {} : { fence: reported.fence, owner: `${reported.op}-owner` }),
})
const faultSpan = (type: string, target: string, start: number, end?: number): Fault[] => {
  const begin: Fault = { ev: 'fault-start', t: start, client: 'nemesis', type, target }
  return end === undefined ? [begin] : [begin, { ...begin, ev: 'fault-end', t: end }]
}

interface HoldSpec {
  readonly client: string
  readonly op: string
  readonly fence: string
  readonly invoke: number
  readonly ok: number
  /** @default invoke + TTL */
  readonly validUntil?: number
  /** When the release is sent (its reply 5 ms later); none if omitted. */
  readonly release?: number
  readonly key?: string
}

/** A hold's worker events: invoke, grant and (optionally) release. */
function hold(spec: HoldSpec): HistoryEvent[] {
  const { client, op, key = 'k' } = spec
  const events = [
    invoke(spec.invoke, client, op, key),
    ok(spec.ok, client, op, spec.fence, spec.validUntil ?? spec.invoke + TTL, key),
  ]
  if (spec.release !== undefined) {
    events.push(releaseInvoke(spec.release, client, op), releaseOk(spec.release + 5, client, op))
  }
  return events
}

/** A write sent at `t` and the resource's verdict 1 ms later. */
function write(
  t: number,
  client: string,
  op: string,
  fence: string,
  value: string,
  verdict: WriteResult['ev'],
  highest: string,
  key = 'k',
): HistoryEvent[] {
  const sent: WriteInvoke = { ev: 'write-invoke', t, client, op, key, fence, value }
  return [sent, { ...sent, ev: verdict, t: t + 1, client: 'resource', highest }]
}

/** Only the resource's verdicts, for the A3 tests that need no holds. */
const verdict = (
  t: number,
  fence: string,
  value: string,
  ev: WriteResult['ev'],
  highest: string,
  key = 'k',
) => write(t, 'w1', `op-${value}`, fence, value, ev, highest, key).slice(1)

const ZERO = { A1: 0, A2: 0, A3: 0, A4: 0, A5: 0, A7: 0, A8: 0 }

/** A rule's counters, with how many examples and notes it kept (their wording is asserted apart). */
function countsOf<T extends RuleReport>({ examples, notes, ...counters }: T) {
  return { ...counters, examples: examples.length, notes: notes.length }
}

describe('checkHistory', () => {
  // Three sequential holds on k, one on another key, a refusal, a timeout and a pause between holds.
  const clean: HistoryEvent[] = [
    ...hold({ client: 'w1', op: 'w1-1', fence: '1', invoke: 0, ok: 10, release: 100 }),
    ...write(20, 'w1', 'w1-1', '1', 'a', 'write-accepted', '0'),
    invoke(50, 'w2', 'w2-1'),
    fail(60, 'w2', 'w2-1', true),
    ...hold({ client: 'w2', op: 'w2-2', fence: '2', invoke: 200, ok: 230, release: 1000 }),
    ...write(300, 'w2', 'w2-2', '2', 'b', 'write-accepted', '1'),
    renew(700, 'w2', 'w2-2', 1700),
    ...faultSpan('pause-holder', 'w1', 1100, 1300),
    ...hold({ client: 'w1', op: 'w1-2', fence: '3', invoke: 1250, ok: 1400, release: 1500 }),
    ...write(1450, 'w1', 'w1-2', '3', 'c', 'write-accepted', '2'),
    ...hold({ client: 'w3', op: 'w3-1', fence: '1', invoke: 0, ok: 5, release: 50, key: 'other' }),
    invoke(60, 'w3', 'w3-2', 'other'),
    fail(70, 'w3', 'w3-2', false, 'other'),
    finalRead(1505, 'k', ['a', 'b', 'c']),
  ]

  it('reports a clean history as clean, with its figures', () => {
    const report = checkHistory(clean, FENCED)
    const nothing = { examples: [], notes: [] }
    assert.deepEqual(report, {
      fenced: true,
      operations: 6,
      grants: 4,
      failsDefinite: 1,
      failsIndeterminate: 1,
      faultsByType: { 'pause-holder': 1 },
      acquireP50: 10, // latencies 5, 10, 30, 150
      acquireP99: 150,
      recoveryP50: 100, // fault-end 1300, next grant 1400
      recoveryP99: 100,
      a1: { violations: 0, overlaps: 0, potential: 0, ...nothing },
      a2: { violations: 0, duplicates: 0, orderViolations: 0, regressions: 0, ...nothing },
      a3: {
        violations: 0,
        acceptedOutOfOrder: 0,
        staleRejected: 0,
        staleAccepted: 0,
        lostUpdates: 0,
        outOfOrderAccepted: 0,
        ...nothing,
      },
      a4: { violations: 0, releases: 0, renewals: 0, ...nothing },
      a5: { violations: 0, lateLost: 0, writesAfterValidity: 0, excusedByStalls: 0, ...nothing },
      a7: { violations: 0, lastRecoveryMs: 100, slowRecovery: false, stuck: 0, idle: 0, ...nothing },
      a8: { violations: 0, broken: 0, ...nothing },
      i1: { overlappingHolds: 0, examples: [] },
      findings: [],
    })
    assert.deepEqual(violationsOf(report), ZERO)
  })

  it('reads the events in time order, whatever order the files were merged in', () => {
    assert.deepEqual(checkHistory([...clean].reverse(), FENCED), checkHistory(clean, FENCED))
  })

  it('reports the clean history as clean in unfenced mode (every accepted value was kept)', () => {
    const report = checkHistory(clean, UNFENCED)
    assert.equal(report.fenced, false)
    assert.equal(report.a3.lostUpdates, 0)
    assert.deepEqual(report.findings, [])
    assert.deepEqual(violationsOf(report), ZERO)
  })

  it('reports no figures it has no samples for', () => {
    const report = checkHistory([invoke(0, 'w1', 'w1-1'), fail(5, 'w1', 'w1-1', true)], FENCED)
    assert.equal(report.acquireP50, undefined)
    assert.equal(report.acquireP99, undefined)
    assert.equal(report.recoveryP50, undefined)
    assert.equal(report.a7.lastRecoveryMs, undefined)
    assert.deepEqual(violationsOf(checkHistory([], FENCED)), ZERO)
  })
})

describe('A1: no grant inside another hold validity', () => {
  it('counts a grant inside a hold that was still valid', () => {
    const report = checkHistory(
      [
        ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 1200 }),
        ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 400, ok: 500, release: 600 }),
      ],
      FENCED,
    )
    assert.equal(report.a1.overlaps, 1)
    assert.equal(violationsOf(report).A1, 1)
    assert.equal(report.a1.examples.length, 1)
    assert.match(report.a1.examples[0]!, /b \(w2, fence 2, granted t=500\) inside the validity of a \(w1/)
  })

  it("ends a hold's validity when a host reboot or a process-bound lease's kill ends its client, not when a process is killed", () => {
    const history = (type: string) =>
      checkHistory(
        [
          ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, validUntil: 1000 }),
          ...faultSpan(type, 'w1', 100, 120),
          ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 300, ok: 400, release: 500 }),
        ],
        FENCED,
      )
    assert.equal(history(REBOOT_KILL).a1.overlaps, 0)
    assert.equal(history(LEASE_KILL).a1.overlaps, 0)
    assert.equal(history('kill-holder').a1.overlaps, 1)
  })

  it('counts both grants of a simultaneous pair, each inside the other', () => {
    const report = checkHistory(
      [
        ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 100 }),
        ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 0, ok: 10, release: 100 }),
      ],
      FENCED,
    )
    assert.equal(report.a1.overlaps, 2)
  })

  it('extends validity by renewals that came in time, and not after the lease lapsed', () => {
    const renewed = [
      ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, validUntil: 1000 }),
      ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 1400, ok: 1500, release: 1600 }),
    ]
    assert.equal(checkHistory([...renewed, renew(900, 'w1', 'a', 1900)], FENCED).a1.overlaps, 1)
    assert.equal(checkHistory([...renewed, renew(1100, 'w1', 'a', 2100)], FENCED).a1.overlaps, 0)
    // A chain: 900 -> 1400, then 1300 -> 2300, so the grant at 1500 is inside.
    const chained = [...renewed, renew(900, 'w1', 'a', 1400), renew(1300, 'w1', 'a', 2300)]
    assert.equal(checkHistory(chained, FENCED).a1.overlaps, 1)
  })

  it('ends validity at the loss signal and at the release sent', () => {
    const after = hold({ client: 'w2', op: 'b', fence: '2', invoke: 400, ok: 500, release: 600 })
    const holder = hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10 })
    assert.equal(checkHistory([...holder, lost(400, 'w1', 'a'), ...after], FENCED).a1.overlaps, 0)
    assert.equal(checkHistory([...holder, releaseInvoke(500, 'w1', 'a'), ...after], FENCED).a1.overlaps, 0)
  })

  it('counts a grant inside a maybe-hold as potential, not as a violation', () => {
    const report = checkHistory(
      [
        invoke(0, 'w1', 'm'),
        fail(300, 'w1', 'm', false),
        ...hold({ client: 'w2', op: 'b', fence: '1', invoke: 350, ok: 400, release: 450 }),
        // The window is [0, 1000): a grant at 1000 is outside it.
        ...hold({ client: 'w3', op: 'c', fence: '2', invoke: 900, ok: 1000, release: 1100 }),
        // A definite refusal is no maybe-hold.
        invoke(1200, 'w1', 'n'),
        fail(1210, 'w1', 'n', true),
        ...hold({ client: 'w2', op: 'd', fence: '3', invoke: 1300, ok: 1310, release: 1400 }),
      ],
      FENCED,
    )
    assert.equal(report.a1.potential, 1)
    assert.equal(report.a1.overlaps, 0)
    assert.equal(violationsOf(report).A1, 0)
    assert.equal(report.a1.notes.length, 1)
    assert.match(
      report.a1.notes[0]!,
      /b \(w2, fence 1, granted t=400\) inside the maybe-hold of m \(w1, t=0\)/,
    )
  })
})

describe('A2: fences unique, ordered and never regressing', () => {
  // [duplicates, orderViolations, regressions, violations]; the example is the first one kept.
  const cases: Array<{ title: string; holds: HoldSpec[]; counts: number[]; example?: RegExp }> = [
    {
      title: 'a duplicate fence (also out of order, as the grants were sequential)',
      holds: [
        { client: 'w1', op: 'a', fence: '5', invoke: 0, ok: 10, release: 100 },
        { client: 'w2', op: 'b', fence: '5', invoke: 200, ok: 210, release: 300 },
      ],
      counts: [1, 1, 0, 1],
      example: /b \(w2, fence 5.*duplicates a \(w1, fence 5.*was invoked after a/,
    },
    {
      title: 'order violations per grant, against the earliest of the highest fences before its invoke',
      holds: [
        { client: 'w1', op: 'a', fence: '5', invoke: 0, ok: 10, release: 100 },
        { client: 'w2', op: 'b', fence: '5', invoke: 200, ok: 210, release: 300 },
        { client: 'w3', op: 'c', fence: '4', invoke: 400, ok: 410, release: 500 },
      ],
      counts: [1, 2, 1, 2],
    },
    {
      // a was invoked before b's grant, so real time does not order them; the grant order still does.
      title: 'a regression of concurrent acquires, which is no order violation',
      holds: [
        { client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 20, release: 30 },
        { client: 'w2', op: 'b', fence: '2', invoke: 5, ok: 10, release: 15 },
      ],
      counts: [0, 0, 1, 1],
      example: /a \(w1, fence 1, granted t=20\) regresses below b \(w2, fence 2/,
    },
    {
      title: 'nothing, comparing fences as integers: neither as text nor as float',
      holds: [
        { client: 'w1', op: 'a', fence: '9', invoke: 0, ok: 10, release: 20 },
        { client: 'w1', op: 'b', fence: '10', invoke: 30, ok: 40, release: 50 },
        { client: 'w1', op: 'c', fence: '9007199254740992', invoke: 60, ok: 70, release: 80 },
        { client: 'w1', op: 'd', fence: '9007199254740993', invoke: 90, ok: 100, release: 110 },
      ],
      counts: [0, 0, 0, 0],
    },
  ]
  for (const { title, holds, counts, example } of cases) {
    it(`counts ${title}`, () => {
      const report = checkHistory(holds.flatMap(hold), FENCED)
      const { duplicates, orderViolations, regressions, violations } = report.a2
      assert.deepEqual([duplicates, orderViolations, regressions, violations], counts)
      assert.equal(report.a2.examples.length, counts[3])
      assert.equal(violationsOf(report).A2, counts[3])
      if (example) assert.match(report.a2.examples[0]!, example)
    })
  }

  it('names the earliest grant of the highest fence in an order violation', () => {
    const report = checkHistory(cases[1]!.holds.flatMap(hold), FENCED)
    assert.match(report.a2.examples[1]!, /c \(w3, fence 4, granted t=410\) was invoked after a \(w1, fence 5/)
  })
})

describe('A3: the protected resource', () => {
  it('fenced mode: counts accepted writes out of order or stale, once each, and stale rejections', () => {
    const report = checkHistory(
      [
        ...verdict(0, '1', 'a', 'write-accepted', '0'),
        ...verdict(10, '3', 'b', 'write-accepted', '1'),
        ...verdict(20, '2', 'c', 'write-accepted', '3'), // stale and out of order: one violation
        ...verdict(30, '3', 'd', 'write-accepted', '2'), // out of order (3 <= 3), though its `highest` says 2
        ...verdict(40, '2', 'e', 'write-rejected', '3'),
        ...verdict(50, '4', 'f', 'write-accepted', '3'),
        ...verdict(60, '1', 'g', 'write-accepted', '0', 'k2'), // another key has its own order
      ],
      FENCED,
    )
    assert.deepEqual(countsOf(report.a3), {
      violations: 2,
      acceptedOutOfOrder: 2,
      staleRejected: 1,
      staleAccepted: 1,
      lostUpdates: 0,
      outOfOrderAccepted: 0,
      examples: 2,
      notes: 0,
    })
    assert.match(report.a3.examples[0]!, /k: op-c write c with fence 2 accepted t=21; highest was 3/)
    assert.deepEqual(report.findings, [])
  })

  it('unfenced mode: counts accepted values missing from the final read as lost updates', () => {
    const report = checkHistory(
      [
        ...verdict(0, '1', 'a', 'write-accepted', '0'),
        ...verdict(10, '3', 'b', 'write-accepted', '1'),
        ...verdict(20, '2', 'c', 'write-accepted', '3'),
        ...verdict(30, '4', 'd', 'write-accepted', '3'),
        ...verdict(40, '4', 'e', 'write-accepted', '4'), // stale (4 <= 4), yet not lower than one before
        finalRead(100, 'k', ['a', 'd', 'e']),
        ...verdict(40, '1', 'x', 'write-accepted', '0', 'k2'), // no final-read: a finding, not a count
      ],
      UNFENCED,
    )
    assert.deepEqual(countsOf(report.a3), {
      violations: 2,
      acceptedOutOfOrder: 0,
      staleRejected: 0,
      staleAccepted: 2,
      lostUpdates: 2,
      outOfOrderAccepted: 1,
      examples: 2,
      notes: 1,
    })
    assert.deepEqual(report.findings, ['k2: accepted writes but no final-read (lost updates not checked)'])
    assert.equal(violationsOf(report).A3, 2)
  })
})

describe('A4: release and renewal never touch another owner', () => {
  it('counts a release sent after another grant that still released', () => {
    const report = checkHistory(
      [
        // a lapsed at 1000; b was granted at 1100; a's release, sent at 1200, still removed something.
        ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 1200 }),
        ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 1050, ok: 1100, release: 1300 }),
        // The same on k2, but the store said "not yours": correct.
        ...hold({ client: 'w1', op: 'c', fence: '1', invoke: 0, ok: 10, key: 'k2' }),
        ...hold({ client: 'w2', op: 'd', fence: '2', invoke: 1050, ok: 1100, release: 1300, key: 'k2' }),
        releaseInvoke(1200, 'w1', 'c'),
        releaseOk(1205, 'w1', 'c', false),
        // On k3 the release was sent before the next grant; only its reply came after: correct.
        ...hold({ client: 'w1', op: 'e', fence: '1', invoke: 0, ok: 10, release: 1050, key: 'k3' }),
        ...hold({ client: 'w2', op: 'f', fence: '2', invoke: 1000, ok: 1052, release: 1300, key: 'k3' }),
      ],
      FENCED,
    )
    assert.deepEqual(countsOf(report.a4), { violations: 1, releases: 1, renewals: 0, examples: 1, notes: 0 })
    assert.match(
      report.a4.examples[0]!,
      /k: a \(w1, fence 1, granted t=10\) released \(sent t=1200\) after b/,
    )
  })

  it('counts a renewal that succeeded after another grant', () => {
    const report = checkHistory(
      [
        ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 1300 }),
        renew(500, 'w1', 'a', 1000), // before b: fine
        ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 1050, ok: 1100, release: 1200 }),
        renew(1150, 'w1', 'a', 2150), // after b: it extended b's lease
      ],
      FENCED,
    )
    assert.deepEqual(countsOf(report.a4), { violations: 2, releases: 1, renewals: 1, examples: 2, notes: 0 })
    assert.equal(report.a1.overlaps, 0) // the late renewal does not revive a lapsed lease
  })
})

describe('A5: the loss signal comes on time', () => {
  const stall = (t: number, client: string, ms: number): HistoryEvent => ({ t, client, ev: 'stall', ms })
  // Every hold is valid until 1000 (grace 250, deadline 1250); the history runs to 2000.
  const held = (client: string, op: string, key: string, more: Partial<HoldSpec> = {}) =>
    hold({ client, op, fence: '1', invoke: 0, ok: 10, validUntil: 1000, key, ...more })
  const history: HistoryEvent[] = [
    ...held('w1', 'late', 'k1'),
    lost(1400, 'w1', 'late'),
    ...write(1100, 'w1', 'late', '1', 'x', 'write-accepted', '0', 'k1'), // after its validity
    ...faultSpan('pause-holder', 'w1', 1300, 1350), // after the deadline: no excuse
    ...held('w2', 'onTime', 'k2'),
    lost(1200, 'w2', 'onTime'),
    ...write(500, 'w2', 'onTime', '1', 'y', 'write-accepted', '0', 'k2'),
    ...held('w3', 'missing', 'k3'),
    ...faultSpan('pause-holder', 'w9', 0, 2000), // aimed at someone else: no excuse for w3
    ...faultSpan('pause-holder', 'w3', 0, 5), // over before the grant: no excuse either
    ...held('w4', 'paused', 'k4'),
    ...faultSpan('pause-holder', 'w4', 500, 1600),
    ...held('w5', 'killed', 'k5'),
    ...faultSpan('kill-holder', 'w5', 800),
    ...held('w6', 'released', 'k6', { release: 500 }),
    ...write(500, 'w6', 'released', '1', 'z', 'write-accepted', '0', 'k6'), // as the release went out: after
    ...held('w7', 'renewed', 'k7'),
    renew(900, 'w7', 'renewed', 1900), // deadline 2150, past the end of the history: not judged yet
    // Granted after its own deadline (a slow reply): the signal is due a grace after the grant, not before.
    ...held('w8', 'tardy', 'k8', { ok: 1200 }),
    lost(1300, 'w8', 'tardy'),
    finalRead(2000, 'k1', []),
  ]

  it('counts a late or missing loss signal of a client that lived on', () => {
    const report = checkHistory(history, FENCED)
    assert.deepEqual(countsOf(report.a5), {
      violations: 2,
      lateLost: 2,
      writesAfterValidity: 2,
      excusedByStalls: 0,
      examples: 2,
      notes: 2,
    })
    assert.match(report.a5.examples.join('\n'), /late \(w1.*lost heard t=1400/)
    assert.match(report.a5.examples.join('\n'), /missing \(w3.*lost heard never/)
    assert.equal(violationsOf(report).A5, 2)
  })

  it('honours lostGraceMs', () => {
    assert.equal(checkHistory(history, { ...FENCED, lostGraceMs: 500 }).a5.lateLost, 1) // only the missing one
  })

  it('moves the deadline past a stall of the client, never past a loss that stays unheard', () => {
    const report = checkHistory(
      [
        ...held('w1', 'stalled', 'k1'),
        stall(1350, 'w1', 400), // 950-1350: over the deadline (1250): due at 1600 now
        lost(1400, 'w1', 'stalled'),
        ...held('w3', 'tooLate', 'k3'),
        stall(1300, 'w3', 400), // due at 1550, but its loss came at 1700
        lost(1700, 'w3', 'tooLate'),
        ...held('w4', 'never', 'k4'),
        stall(1300, 'w4', 400), // excuses nothing once the stall is over: still never heard by 2000
        ...held('w5', 'other', 'k5'),
        stall(1300, 'w9', 400), // another worker's stall is no excuse
        lost(1400, 'w5', 'other'),
        ...held('w6', 'before', 'k6'),
        stall(5, 'w6', 5), // over before the grant: no excuse
        lost(1400, 'w6', 'before'),
        finalRead(2000, 'k1', []),
      ],
      FENCED,
    )
    assert.equal(report.a5.excusedByStalls, 1)
    assert.equal(report.a5.lateLost, 4)
    assert.doesNotMatch(report.a5.examples.join('\n'), /\(w1\b/)
  })

  it("moves every hold's deadline past a stall of the harness (its stamps in it were late)", () => {
    const history = (stalled: boolean) => [
      ...held('w2', 'harness', 'k2'),
      ...(stalled ? [stall(1300, 'harness', 200)] : []), // stamps late until 1300: due at 1550
      lost(1500, 'w2', 'harness'),
      finalRead(2000, 'k2', []),
    ]
    assert.equal(checkHistory(history(false), FENCED).a5.lateLost, 1)
    const report = checkHistory(history(true), FENCED)
    assert.equal(report.a5.lateLost, 0)
    assert.equal(report.a5.excusedByStalls, 1)
  })
})

describe('A7: the lock idle while acquires wait (scenarios that set idleBoundMs)', () => {
  const OPTIONS: CheckOptions = { ...FENCED, idleBoundMs: 500 }
  const base = [
    ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 100 }),
    invoke(50, 'w2', 'b'),
  ]

  it('flags a lock left idle longer than the bound while an acquire waited (a grant nobody knows of)', () => {
    const report = checkHistory(
      [...base, ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 50, ok: 1200, release: 1300 })].filter(
        (e, i, all) => all.findIndex((x) => JSON.stringify(x) === JSON.stringify(e)) === i,
      ),
      OPTIONS,
    )
    assert.equal(report.a7.idle, 1)
    assert.equal(violationsOf(report).A7, 1)
    assert.match(report.a7.examples[0]!, /idle 1\d\d\d ms from t=1\d\d while acquires waited/)
  })

  it('accepts a short idle time, idle time with nobody waiting, and histories checked without the bound', () => {
    const quick = [...base, ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 50, ok: 400, release: 500 })]
    assert.equal(checkHistory(quick, OPTIONS).a7.idle, 0)
    const nobody = [
      ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 100 }),
      ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 2000, ok: 2010, release: 2100 }),
    ]
    assert.equal(checkHistory(nobody, OPTIONS).a7.idle, 0)
    const slow = [
      ...base,
      ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 50, ok: 1200, release: 1300 }),
    ]
    assert.equal(checkHistory(slow, FENCED).a7.idle, 0)
  })
})

describe('A7: liveness after the faults', () => {
  const OPTIONS = FENCED // bound: ttl 1000 + recovery 500

  it('flags a slow recovery after the last fault, and reports recovery percentiles over every fault', () => {
    const faults = [...faultSpan('latency', 'proxy', 100, 200), ...faultSpan('partition', 'redis', 0, 1000)]
    const slow = checkHistory(
      [...faults, ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 500, ok: 2600, release: 2700 })],
      OPTIONS,
    )
    assert.deepEqual(countsOf(slow.a7), {
      violations: 1,
      lastRecoveryMs: 1600,
      slowRecovery: true,
      stuck: 0,
      idle: 0,
      examples: 1,
      notes: 0,
    })
    assert.match(slow.a7.examples[0]!, /first grant 1600 ms after the last fault ended \(t=1000\)/)
    assert.equal(slow.recoveryP50, 1600) // recoveries: 1600 (from 1000) and 2400 (from 200)
    assert.equal(slow.recoveryP99, 2400)
    assert.deepEqual(slow.faultsByType, { latency: 1, partition: 1 })
    const fast = checkHistory(
      [...faults, ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 500, ok: 2400, release: 2500 })],
      OPTIONS,
    )
    assert.equal(fast.a7.slowRecovery, false)
    assert.equal(fast.a7.lastRecoveryMs, 1400)
  })

  it('flags no grant at all after the last fault while clients asked, once the history is long enough', () => {
    const asked = [...faultSpan('partition', 'redis', 0, 1000), invoke(1100, 'w1', 'a')]
    const report = checkHistory([...asked, finalRead(3000, 'k', [])], OPTIONS)
    assert.deepEqual(countsOf(report.a7), {
      violations: 2,
      lastRecoveryMs: undefined,
      slowRecovery: true,
      stuck: 1, // the same waiter, 1900 ms without an answer
      idle: 0,
      examples: 2,
      notes: 0,
    })
    const nobodyAsked = [...faultSpan('partition', 'redis', 0, 1000), finalRead(3000, 'k', [])]
    assert.equal(checkHistory(nobodyAsked, OPTIONS).a7.slowRecovery, false)
    const short = checkHistory([...asked, finalRead(2000, 'k', [])], OPTIONS)
    assert.equal(short.a7.violations, 0)
    assert.deepEqual(short.findings, ['history ends 1000 ms after the last fault, within the A7 bound'])
  })

  it('counts stuck waiters, except those of a client killed after it asked', () => {
    const report = checkHistory(
      [
        invoke(0, 'w1', 'stuck'),
        invoke(0, 'w2', 'killed'),
        ...faultSpan('kill-holder', 'w2', 100),
        invoke(10, 'w4', 'restarted'), // killed before it asked: no excuse
        ...faultSpan('kill-holder', 'w4', 5),
        invoke(1000, 'w3', 'young'), // 1000 ms before the end: within the bound
        finalRead(2000, 'k', []),
      ],
      OPTIONS,
    )
    assert.equal(report.a7.stuck, 2)
    assert.equal(report.a7.slowRecovery, false)
    assert.equal(violationsOf(report).A7, 2)
    assert.match(report.a7.examples.join('\n'), /k: stuck \(w1\) invoked t=0, never answered/)
    assert.deepEqual(report.findings, ['faults started but none ended (A7 recovery not checked)'])
  })
})

describe('A7 on a loaded machine: a waiter counts only the time it could run', () => {
  const OPTIONS = FENCED // bound: ttl 1000 + recovery 500
  const stall = (t: number, client: string, ms: number): HistoryEvent => ({ t, client, ev: 'stall', ms })

  it('excuses an unanswered waiter the stalls it reported, and not one that sat idle', () => {
    const waits = [invoke(0, 'w1', 'slow'), invoke(0, 'w2', 'idle'), finalRead(2000, 'k', [])]
    // w1 could run 1400 ms of its 2000 (a 600 ms stall); w2 ran all 2000 and heard nothing.
    const report = checkHistory([...waits, stall(900, 'w1', 600)], OPTIONS)
    assert.equal(report.a7.stuck, 1)
    assert.match(report.a7.examples.join('\n'), /k: idle \(w2\) invoked t=0, never answered/)
    assert.equal(checkHistory([...waits, stall(900, 'w1', 400)], OPTIONS).a7.stuck, 2)
  })

  it("ends an unanswered waiter's time at its kill at the end of the run", () => {
    const killedAtEnd = [invoke(0, 'w1', 'a'), ...faultSpan('kill-at-end', 'w1', 1400, 1400)]
    const report = checkHistory([...killedAtEnd, finalRead(3000, 'k', [])], OPTIONS)
    assert.equal(report.a7.stuck, 0)
    const late = [invoke(0, 'w1', 'a'), ...faultSpan('kill-at-end', 'w1', 1600, 1600)]
    assert.equal(checkHistory([...late, finalRead(3000, 'k', [])], OPTIONS).a7.stuck, 1)
  })

  it('excuses a slow recovery while every waiter was stalled, and not while one could run', () => {
    const history = [
      ...faultSpan('partition', 'redis', 0, 1000),
      invoke(500, 'w2', 'b'),
      ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 500, ok: 2600, release: 2700 }),
    ]
    // w1 stalled 200 ms of the 1600 to its grant; w2, waiting too, ran all of it.
    const oneRan = checkHistory([...history, stall(2000, 'w1', 200), fail(2650, 'w2', 'b', true)], OPTIONS)
    assert.equal(oneRan.a7.slowRecovery, true)
    assert.match(oneRan.a7.examples[0]!, /first grant 1600 ms .*; w2 waited 1600 ms of it, not stalled/)
    const bothStalled = [
      ...history,
      stall(2000, 'w1', 200),
      stall(2000, 'w2', 200),
      fail(2650, 'w2', 'b', true),
    ]
    const excused = checkHistory(bothStalled, OPTIONS)
    assert.equal(excused.a7.slowRecovery, false)
    assert.equal(excused.a7.lastRecoveryMs, 1600) // the wall-clock figure, as reported
  })
})

describe('I1: believed holds that overlap', () => {
  it('counts each hold whose believed interval overlaps another, without failing the run', () => {
    const report = checkHistory(
      [
        // a's validity ended at 500, but it believed it held until its loss signal at 1500.
        ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, validUntil: 500 }),
        lost(1500, 'w1', 'a'),
        ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 550, ok: 600, release: 700 }),
        ...hold({ client: 'w3', op: 'c', fence: '3', invoke: 750, ok: 800, release: 900 }),
        // Released the moment it was granted: an empty interval overlaps nothing.
        ...hold({ client: 'w3', op: 'e', fence: '4', invoke: 950, ok: 1000, release: 1000 }),
        ...hold({ client: 'w2', op: 'd', fence: '5', invoke: 1550, ok: 1600, release: 1700 }),
      ],
      FENCED,
    )
    assert.equal(report.i1.overlappingHolds, 3)
    assert.equal(report.i1.examples.length, 2)
    assert.equal(report.a1.overlaps, 0)
    assert.deepEqual(violationsOf(report), { ...ZERO, A5: 1 }) // the loss signal came 1000 ms late
  })
})

describe('chaos checker: a semaphore run (limit)', () => {
  const SEMAPHORE: CheckOptions = { ...UNFENCED, limit: 2 }
  // Three holds valid together: a and b at once is what a limit of 2 allows, c beside them is not.
  const three = [
    ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 500 }),
    ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 0, ok: 20, release: 500 }),
    ...hold({ client: 'w3', op: 'c', fence: '3', invoke: 0, ok: 30, release: 500 }),
  ]

  it('counts a grant made while `limit` other holds were valid', () => {
    const report = checkHistory(three, SEMAPHORE)
    assert.equal(report.a1.violations, 1, report.a1.examples.join('\n'))
    assert.match(report.a1.examples[0] ?? '', /c .*granted while 2 holds of 2 permits were valid/)
  })

  it('lets `limit` holds overlap, and a grant after one of them was released', () => {
    assert.equal(checkHistory(three, { ...SEMAPHORE, limit: 3 }).a1.violations, 0)
    const turns = [
      ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 100 }),
      ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 0, ok: 20, release: 500 }),
      ...hold({ client: 'w3', op: 'c', fence: '3', invoke: 0, ok: 130, release: 500 }),
    ]
    const report = checkHistory(turns, SEMAPHORE)
    assert.equal(report.a1.violations, 0, report.a1.examples.join('\n'))
    // Several holders at once are the point: the one-holder rules count nothing.
    assert.equal(report.a4.violations, 0)
    assert.equal(report.a3.violations, 0)
  })

  it('still counts sequences that go back (A2)', () => {
    const back = [
      ...hold({ client: 'w1', op: 'a', fence: '5', invoke: 0, ok: 10, release: 100 }),
      ...hold({ client: 'w2', op: 'b', fence: '4', invoke: 200, ok: 210, release: 300 }),
    ]
    assert.ok(checkHistory(back, SEMAPHORE).a2.violations > 0)
  })
})

describe('chaos checker: a semaphore run, A2', () => {
  const SEMAPHORE: CheckOptions = { ...UNFENCED, limit: 2 }
  // b's grant (sequence 2) heard before a's (sequence 1): two grants made together, replies crossed.
  const crossed = [
    ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 20, release: 100 }),
    ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 0, ok: 10, release: 100 }),
  ]

  it('takes crossed replies of grants made together for what they are', () => {
    const report = checkHistory(crossed, SEMAPHORE)
    assert.equal(report.a2.violations, 0, report.a2.examples.join('\n'))
    assert.equal(report.a2.notes.length, 1)
    // A mutex's grants are never made together: the same history is a regression there.
    assert.ok(checkHistory(crossed, UNFENCED).a2.violations > 0)
  })

  it('still counts a number asked for after a higher one was heard, and a duplicate', () => {
    const late = [
      ...hold({ client: 'w1', op: 'a', fence: '5', invoke: 0, ok: 10, release: 300 }),
      ...hold({ client: 'w2', op: 'b', fence: '4', invoke: 50, ok: 60, release: 300 }),
      ...hold({ client: 'w3', op: 'c', fence: '5', invoke: 400, ok: 410, release: 500 }),
    ]
    const report = checkHistory(late, SEMAPHORE)
    assert.equal(report.a2.orderViolations, 2, report.a2.examples.join('\n'))
    assert.equal(report.a2.duplicates, 1)
  })
})

describe('chaos checker: a read-write lock run (rwlock)', () => {
  const RW: CheckOptions = { ...FENCED, rwlock: true }
  /** A hold of `mode`: its `acquire-ok` carries the mode. */
  const rwHold = (mode: 'read' | 'write', spec: HoldSpec): HistoryEvent[] =>
    hold(spec).map((e) => (e.ev === 'acquire-ok' ? { ...e, mode } : e))

  it('lets readers overlap and share their epoch’s fence', () => {
    const readers = [
      ...rwHold('read', { client: 'w1', op: 'a', fence: '3', invoke: 0, ok: 10, release: 500 }),
      ...rwHold('read', { client: 'w2', op: 'b', fence: '3', invoke: 0, ok: 20, release: 500 }),
      ...rwHold('write', { client: 'w3', op: 'c', fence: '4', invoke: 0, ok: 600, release: 700 }),
      ...rwHold('read', { client: 'w1', op: 'd', fence: '5', invoke: 650, ok: 710, release: 800 }),
    ]
    const report = checkHistory(readers, RW)
    assert.deepEqual(violationsOf(report), ZERO, report.a2.examples.join('\n'))
    // A mutex's grants never share a fence nor overlap: the same history breaks both rules there.
    const mutex = checkHistory(readers, FENCED)
    assert.ok(mutex.a1.violations > 0 && mutex.a2.duplicates > 0)
  })

  it('counts a writer beside any other holder, and a reader beside a writer', () => {
    const together = [
      ...rwHold('read', { client: 'w1', op: 'a', fence: '3', invoke: 0, ok: 10, release: 500 }),
      ...rwHold('write', { client: 'w2', op: 'b', fence: '4', invoke: 0, ok: 20, release: 500 }),
      ...rwHold('read', { client: 'w3', op: 'c', fence: '5', invoke: 0, ok: 30, release: 500 }),
    ]
    // b inside a's validity; c inside b's (and a's, which is allowed).
    assert.equal(checkHistory(together, RW).a1.violations, 2)
  })

  it('counts a reader not above a writer granted before it, and a writer not above a reader', () => {
    const fences = [
      ...rwHold('write', { client: 'w1', op: 'a', fence: '4', invoke: 0, ok: 10, release: 100 }),
      ...rwHold('read', { client: 'w2', op: 'b', fence: '4', invoke: 200, ok: 210, release: 300 }),
      ...rwHold('write', { client: 'w3', op: 'c', fence: '4', invoke: 400, ok: 410, release: 500 }),
    ]
    const report = checkHistory(fences, RW)
    assert.equal(report.a2.orderViolations, 2, report.a2.examples.join('\n'))
    assert.equal(report.a2.duplicates, 2)
  })
})

describe('A8: a break ends only a grant it found', () => {
  // w1 holds fence 1 (valid to 1000); w2 waits from 5; the operator breaks at 100. w1 acts on and
  // releases at 150: no longer its lock.
  const holder = [
    ...hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10 }),
    releaseInvoke(150, 'w1', 'a'),
    releaseOk(155, 'w1', 'a', false),
  ]
  const waiter = (ok: number, end: HistoryEvent) => [
    ...hold({ client: 'w2', op: 'b', fence: '2', invoke: 5, ok }),
    end,
  ]

  it('passes a break that ended the grant live when it began', () => {
    const report = checkHistory(
      [
        ...holder,
        breakEvent(100, 102, true, { op: 'a', fence: '1' }),
        ...waiter(103, releaseInvoke(300, 'w2', 'b')),
      ],
      FENCED,
    )
    // w1's validity ends at the break: w2's grant is inside nobody's.
    assert.deepEqual(violationsOf(report), ZERO, JSON.stringify(report, null, 1))
    assert.equal(report.a8.broken, 1)
  })

  it('knows the grant by its owner, whatever fence the break shows (a quorum shows the nodes’ token)', () => {
    const report = checkHistory(
      [
        ...holder,
        breakEvent(100, 102, true, { op: 'a', fence: '0' }),
        ...waiter(103, releaseInvoke(300, 'w2', 'b')),
      ],
      FENCED,
    )
    assert.deepEqual(violationsOf(report), ZERO)
    assert.deepEqual(report.a8.notes, [])
  })

  it('flags a break that ended the waiter granted on top of the grant it found', () => {
    // The break ended w1's lease, w2 was granted at once, and the break reported (and ended) w2's.
    const history = [
      ...holder,
      breakEvent(100, 103, true, { op: 'b', fence: '2' }),
      ...waiter(101, lost(400, 'w2', 'b')),
    ]
    const report = checkHistory(history, FENCED)
    assert.deepEqual(violationsOf(report), { ...ZERO, A1: 1, A8: 1 })
    assert.match(
      report.a8.examples[0]!,
      /broke fence 2: b \(w2, fence 2, granted t=101\) granted after it began, while a \(w1, fence 1, granted t=10\) had not ended/,
    )
  })

  it('flags it too when the grant it ended silently came after it began (a slow first look)', () => {
    // The break began at 5, before w1's grant; its first look found w1's and ended it; w2 on top.
    const history = [
      ...holder,
      breakEvent(5, 103, true, { op: 'b', fence: '2' }),
      ...waiter(101, lost(400, 'w2', 'b')),
    ]
    assert.deepEqual(violationsOf(checkHistory(history, FENCED)), { ...ZERO, A1: 1, A8: 1 })
  })

  it('passes a break whose first look found a grant made as it began (the holder had just released)', () => {
    const released = hold({ client: 'w1', op: 'a', fence: '1', invoke: 0, ok: 10, release: 99 })
    const history = [
      ...released,
      breakEvent(100, 103, true, { op: 'b', fence: '2' }),
      ...waiter(101, lost(400, 'w2', 'b')),
      // w3 granted after the break: inside w2's validity but for the break that ended it.
      ...hold({ client: 'w3', op: 'c', fence: '3', invoke: 50, ok: 104, release: 200 }),
    ]
    const report = checkHistory(history, FENCED)
    assert.deepEqual(violationsOf(report), ZERO, JSON.stringify(report.a1.examples))
    assert.equal(report.a8.notes.length, 1)
  })

  it('notes a fence nobody heard of, and ignores breaks that broke nothing or failed', () => {
    const history = [
      ...holder,
      breakEvent(100, 102, true, { op: 'x', fence: '7' }),
      breakEvent(200, 202, false, { op: 'a', fence: '1' }),
      { ev: 'break', t: 302, client: 'nemesis', key: 'k', invokedAt: 300, reason: 'timeout' } as HistoryEvent,
    ]
    const report = checkHistory(history, FENCED)
    assert.equal(report.a8.violations, 0)
    assert.equal(report.a8.broken, 1)
    assert.deepEqual(report.a8.notes, [
      'k: break invoked t=100, answered t=102, broke fence 7: no client heard of that grant',
    ])
  })
})
