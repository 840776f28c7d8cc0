/**
 * Admission: a Redlock node votes only while it is *admitted*, that is, while its fence counters are known
 * to be caught up. A grant's token is the largest counter M of its majority, written back to that majority
 * before the grant counts, and any later majority shares a node with it, so mints more: as long as the
 * nodes remember. A node restarted without persistence forgets its counters, and the write-back raises
 * only each grant's own majority: after C restarts empty, then B, a majority {B, C} (A down) minted M = 1
 * again (issue 11), although at no moment could more than one node not vote. Remembering run_ids in the
 * client cannot catch that (a client that connects after the restart never saw the old run_id), so the
 * state lives on the node.
 *
 * - Marker: `<prefix>!admitted` holds the run_id of the server process that was admitted. A node is
 *   admitted iff its marker equals its current run_id (the STATE script reads both in one step). A server
 *   restarted empty has no marker; one restarted from its files has an older run_id there: both catch up
 *   (conservative: files may lag behind the last writes). Checked once per connection, in the round trip
 *   of INFO and SCRIPT LOAD the node makes anyway (node.ts): the acquire path has no extra round trip.
 * - Catch-up of X: (0) read X's run_id R: what follows is for that server process only; (1) read every
 *   other node's state and keep the admitted ones: s = n - q + 1 are needed (q for an odd n), and only
 *   once R has been up for restartDelay (see below); (2) read all their fence counters: the node's own
 *   `<prefix>!fence`, and the names' `<prefix>{*}:fence` (SCAN MATCH, one MGET per page: holds' fences,
 *   never above the node's counter, and the counters one per name of earlier versions); (3) read their
 *   state again and drop any whose run_id changed (it restarted during the read); (4) raise X's counter to
 *   the largest of them all (RAISE); (5) ADMIT: write R as X's marker, in a script that does so only if X
 *   still runs as R.
 *   Each of steps 1-3 starts once the previous one is over on every node.
 * - Bootstrap: a fresh set has no trace anywhere: no marker, no fence counter. When a majority of the nodes
 *   answers, none of them has a marker or a fence counter under the prefix, and a second look still finds no
 *   marker (so no node was admitted, and nothing granted, while the counters were looked for), the nodes
 *   that answered are admitted at once, each with its run_id in `<prefix>!fresh` too: they vote at once,
 *   without the delayed restart (node.ts). A node that did not answer (down from the start) joins later like
 *   a restarted one: caught up from the others once it has been up for restartDelay. Anything else is not a
 *   fresh set: the node waits (unavailable: liveness lost, never safety).
 * - Why a traceless majority may be taken for fresh: a grant writes the node's counter on q nodes, and
 *   every admission writes a marker; neither is ever removed (no FLUSHALL, no eviction, below). So after any use
 *   of the set, every majority holds a trace, unless its nodes lost their memory (restarted empty) or never
 *   had any (they were not reachable by anyone since the set's first use). Two things keep the second
 *   case narrow: a node that is not admitted gets a trace (`IN_USE` as its marker) from the first catch-up
 *   that finds the set in use, before it waits for anything; and a client that has itself seen the set in use
 *   (a marker, or a node restart) never takes it for fresh, and bootstraps, if it must, only with every
 *   node answering and without skipping the delayed restart. What is left is assumed away below: that the
 *   nodes a new client reaches, a majority, have all lost or never held their traces while the others are
 *   unreachable to it.
 *   The case that must not pass for fresh: A, B, C in use; a lock granted on A and B; B restarts empty; a
 *   new client sees A (a marker), B (empty) and C (empty). A's marker shows the set in use: B and C wait to
 *   be caught up from admitted nodes, B only once it has been up for restartDelay (and the lock is over).
 * Why fences keep increasing. q = floor(n/2) + 1; NA = the number of nodes not admitted; for a past grant
 * value m of a key K, H(m) = the admitted nodes whose counter for K is at least m. A node's counter for K
 * is the larger of its own counter and K's counter of an earlier version, if it still has one: its next
 * grant of K mints more (scripts.ts MINT). A name's keys going with its holds lower no such counter: a
 * hold's fence is never above the node's counter, and a name's old counter is replaced only by a grant,
 * which raises the node's counter past it first. Invariant J:
 *     |H(m)| >= q - NA    for every past grant value m of every key.
 * - A grant writes M back to q admitted nodes before it counts: J holds for M. (A voter that restarts
 *   before the grant counts is in NA then: its new process catches up only once it has been up for
 *   restartDelay, at least the largest ttl, and a grant counts only while valid, within a ttl of its
 *   start, which came before that vote.)
 * - A restart of an admitted node lowers both sides by at most one. Nothing else lowers a counter.
 * - Admitting X (catch-up): when step 1 ended, the s sources and H(m) lay within the n - NA admitted nodes
 *   and s + |H(m)| >= (n - q + 1) + (q - NA) > n - NA, so a source held m; it was the same process until
 *   step 3, so it showed at least m in step 2, and X was raised to at least m: both sides move by one.
 *   A grant that ends after that moment ends while X is not admitted (X is in NA), a margin of one that X's
 *   admission without it uses up. Bootstrap happens only when no node that answers holds a trace, and
 *   then (assumed below) no node holds a counter: J holds with nothing granted yet, whoever is admitted.
 * - A grant by q admitted voters: voters and H(m) lie within the n - NA admitted nodes and q + q - NA >
 *   n - NA, so a voter holds m and M > m. (Voters answer at different moments; a voter below m can only be
 *   a node that was not in H(m) when m was granted, since a node that loses m by a restart catches up, after
 *   the restart, before it votes again; and fewer than q nodes were not in H(m).)
 * Assumed: counters are lost only by restarts (no FLUSHALL, no eviction: `maxmemory-policy noeviction`;
 * an operator must not write the marker by hand unless the node kept every write); and a new client never
 * meets a majority of nodes that all lost their memory (or never had any) while the others are unreachable
 * to it: such a set looks fresh, and its fences start over, like those of a single Redis without
 * persistence, and its locks are granted at once (the delayed restart is for a node that restarted in a set
 * that remembers being used); and restartDelay is at least the largest ttl any client uses (the delayed
 * restart assumes it too; by default it is the largest ttl this client has used, or the default ttl before
 * any).
 * Availability: grants need q admitted nodes that answer, a catch-up s admitted other nodes that answer.
 * If more than n - q nodes restart (empty, or from their files) before the first of them has caught up,
 * no node can know the counters the lost ones held, and the set stays unavailable until an operator acts.
 * Cost: a catch-up reads each of s nodes' counter and the names' fence keys (one per held lock, plus the
 * counters earlier versions left, one per name they used), and writes one value on X: once per restart,
 * by each client connected then (or connecting before it is admitted).
 */
import { NodeTimeoutError, round } from '../../engines/quorum-round.js'
import {
  AdmissionError,
  asError,
  type CatchUpNode,
  type Found,
  isAdmitted,
  isFresh,
  STEP_MS,
  stateOf,
  step,
  summary,
  tooEarly,
} from './admission-state.js'
import { bootstrap } from './bootstrap.js'

/**
 * Catches `x` up and admits it, or throws an `AdmissionError` saying why not (see the top of this file).
 * Raced attempts (another client admitted nodes meanwhile) are tried once more at once.
 */
export async function catchUp(
  x: CatchUpNode,
  all: readonly CatchUpNode[],
  q: number,
  delayMs: number,
  closed: AbortSignal,
) {
  try {
    return await catchUpOnce(x, all, q, delayMs, closed)
  } catch (error) {
    if (!(error instanceof AdmissionError && error.raced)) throw error
    return catchUpOnce(x, all, q, delayMs, closed)
  }
}

async function catchUpOnce(
  x: CatchUpNode,
  all: readonly CatchUpNode[],
  q: number,
  delayMs: number,
  closed: AbortSignal,
) {
  const n = all.length
  const need = n - q + 1
  const others = all.filter((o) => o !== x)

  // (0) The server process being caught up. Everything below is for it alone: ADMIT names its run_id.
  const own = await step(closed, (s) => x.readState(s))
  if (isAdmitted(own)) {
    // Another client caught it up meanwhile.
    x.admitted(own.runId, isFresh(own))
    return
  }
  if (own.runId !== x.runId) {
    // Restarted since its connection was checked: the check that comes with the new connection starts
    // the catch-up of the new process.
    throw new AdmissionError('catching-up', 'restarted again during its catch-up', false, 0)
  }
  const found: Found = { x, others, n, q, own, first: await readOthers(others, need, closed), closed }
  const sources = others.filter((_, i) => isAdmitted(stateOf(found.first[i])))
  const inUse = [own, ...found.first].some((st) => stateOf(st)?.marker != null)
  // The set is in use and X has no trace of it: leave one now, before any wait, so that X never passes for a
  // fresh node later (e.g. when the nodes that hold traces are unreachable). Best effort: the catch-up
  // writes the marker anyway.
  if (inUse && own.marker === null) await step(closed, (s) => x.markInUse(s)).catch(() => {})
  if (sources.length >= need) return copyFrom(found, sources, delayMs)
  if (inUse) throw cannotCopy(found, sources.length)
  return bootstrap(
    found,
    all.some((o) => o.sawUse),
  )
}

/**
 * (1) The others' states. Done as soon as `need` admitted ones have answered (a paused node does not hold
 * it up), or when every node has answered or timed out.
 */
async function readOthers(others: readonly CatchUpNode[], need: number, closed: AbortSignal) {
  const { votes } =
    others.length === 0
      ? { votes: [] }
      : await round(
          others.length,
          STEP_MS,
          closed,
          (i, s) => others[i]!.readState(s),
          (v) =>
            v.filter((r) => r?.ok && isAdmitted(r.value)).length >= need || !v.includes(undefined)
              ? true
              : undefined,
        )
  return votes.map((v) =>
    v === undefined
      ? undefined
      : v.ok
        ? v.value
        : v.error instanceof NodeTimeoutError
          ? new Error(`no reply within ${STEP_MS} ms`)
          : asError(v.error),
  )
}

/** Steps (2) to (5): X's counters copied from `sources`, enough admitted others, then X admitted. */
async function copyFrom(
  { x, others, n, q, own, first, closed }: Found,
  sources: CatchUpNode[],
  delayMs: number,
) {
  const need = n - q + 1
  // Not before X's server has been up for restartDelay (at least the largest ttl in use): a grant that
  // X's previous process voted in, just before it died, counts only while it is valid, so by then it
  // has ended (or was dropped), and its value is on the nodes that hold it when step 1 ends. Caught up
  // sooner, X could miss a grant that still counted on its old process's vote. (A bootstrap, below,
  // needs no wait: nothing was granted on these processes.)
  const left = delayMs - x.upMs
  if (left > 0) throw new AdmissionError('catching-up', tooEarly(delayMs, left), false, left)
  // (2) Every fence counter of every source. Starts after step 1 has ended on every node: the proof
  // needs one moment at which all sources were admitted, and that is it.
  const reads = await Promise.all(sources.map((o) => o.readFences(closed).catch((e: unknown) => asError(e))))
  // (3) A source that restarted during its read (its run_id changed) may have shown an empty server's
  // counters: drop it. One that kept its run_id was the same process throughout, admitted (markers are
  // never removed), and its counters only grew.
  const again = await Promise.all(sources.map((o) => step(closed, (s) => o.readState(s)).catch(asError)))
  const highest = new Map<string, bigint>()
  const used: CatchUpNode[] = []
  sources.forEach((o, i) => {
    const read = reads[i]!
    const later = again[i]!
    const before = stateOf(first[others.indexOf(o)])
    if (read instanceof Error || later instanceof Error || !isAdmitted(later)) return
    if (later.runId !== before?.runId) return
    used.push(o)
    for (const [key, value] of read) if (value > (highest.get(key) ?? -1n)) highest.set(key, value)
  })
  if (used.length < need) {
    throw new AdmissionError(
      'catching-up',
      `not caught up: read the fence counters of ${used.length} of the ${need} admitted nodes it needs ` +
        `(${summary(sources, again)}); tries again`,
    )
  }
  // (4) X's counter up to the maximum. Raising never lowers a counter, so a concurrent grant, or
  // another client catching X up at the same time, is never undone.
  await x.raiseFences(highest, closed)
  // (5) Admitted only if X is still the process of step 0: had it restarted since, the counters just
  // written went (partly) to a process that must catch up on its own, and the script refuses.
  if (!(await step(closed, (s) => x.admit(own.runId, false, s)))) {
    throw new AdmissionError('catching-up', 'restarted during its catch-up; catches up again')
  }
  x.admitted(own.runId, false)
}

/** Why a node of a set in use cannot catch up now: too few admitted others answer. */
function cannotCopy({ n, q }: Found, admittedOthers: number): AdmissionError {
  const need = n - q + 1
  return new AdmissionError(
    'catching-up',
    `not caught up: needs ${need} admitted other node${need === 1 ? '' : 's'} to copy fence counters from, ` +
      `has ${admittedOthers} ` +
      '(see "Fences across restarts" in docs/backends/redlock.md)',
  )
}
