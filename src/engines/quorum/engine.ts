/**
 * Engine `quorum`: one lock over N independent nodes, granted by a majority q = N/2+1 (the Redlock
 * algorithm, with fencing), over a narrow node interface and with no store in it.
 *
 * What it decides, for each primitive of the backend contract:
 * - Every operation goes to all nodes at once; each node has `nodeTimeout` to answer, and a verdict is
 *   reached as soon as a majority has answered one way: a slow node never stalls the others (the round,
 *   the tally and the verdicts are in round.ts).
 * - Validity: the core times every attempt from before the first request on its monotonic clock, and keeps
 *   TTL - elapsed - (TTL x drift + 2 ms); a grant whose validity is gone is released. So a grant reports the
 *   ttl asked for, never more: each node's lease started after the attempt did.
 * - Who may take a free node: the first of the node's waiting line, ordered by a ticket that every node
 *   agrees on (line.ts), so contenders no longer split the votes. A failed attempt is released on
 *   every node that may hold it: at once where it was granted or failed, and where the answer was still
 *   pending at the verdict, when it comes (granted or failed); each release travels on the node's
 *   connection after its acquire. A node that refused gets nothing, so a waiter refused everywhere costs
 *   one command per node. After a split vote the retry comes after a short random delay, as the Redlock
 *   spec says (doubling while it keeps splitting); an attempt refused by a majority waits for its turn
 *   (the core's wait, woken by wait.ts).
 * - Each attempt writes its own owner id on the nodes, `<owner>.<attempt>`: the clean-up of a failed
 *   attempt can then never delete the hold of a later attempt of the same acquire, whatever order the
 *   commands reach a node in (a command re-sent one round trip late, e.g. a script after NOSCRIPT, lands
 *   after the next attempt's acquire). With one owner id for all attempts that happened, and made two
 *   holders.
 * - Fencing: each node's acquire mints a token from that node's counter; the grant's token is the maximum M
 *   over the granting majority, written back (`counter = max(counter, M)`) to the majority's nodes that were
 *   behind, before the grant counts. Any later majority shares a node with this one, so it mints a larger
 *   M. When every node of the majority already returned M (the usual case) nothing is written back and a
 *   grant costs one round trip. The node index sits in the low 8 bits, so grants from different nodes never
 *   share a token.
 *
 * Its node interface, `QuorumAdapter` (adapter.ts): one node's single-node lock with its waiting line, each
 * primitive owner-checked, a throw counting as that node's failure in the round. What a node needs before
 * it may vote (Redlock's delayed restart and admission) is the node's business, inside its `acquire` and
 * `extend`.
 * Who uses it: the Redlock backend (src/backends/redlock, whose adapter.ts is the node over one Redis
 * master). The waiting line is line.ts, inspect's reconstruction inspect.ts, waiting for a
 * release wait.ts, an operator's break break.ts.
 * Longer than ~300 lines on purpose: the whole algorithm (acquire with its clean-up and fence write-back,
 * extend, release, abandon) reads top to bottom in this one file.
 */
import type { AcquireRequest, AttemptResult, ExtendResult, HeldLease, LockInfo } from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { LockError, type NodeFailure, type Primitive, QuorumError, subjectOf } from '../../core/errors.js'
import type { QuorumAdapter } from './adapter.js'
import { inspectVotes, NODE_BITS } from './inspect.js'
import { type NodeAttempt, Tickets } from './line.js'
import { majorityVerdict, round, tally, type Vote, type Votes } from './round.js'

/** A node that had not answered when the round was settled (its `failures` entry). */
const NO_REPLY_YET = 'no reply yet'

export interface QuorumOptions {
  /** Names the store in errors. */
  readonly id: string
  /** What the nodes' holds are, for errors: a lock, or the leadership of an election. @default 'lock' */
  readonly primitive?: Primitive | undefined
  /** How long one node may take to answer. @default ttl / 100, between 20 ms and 200 ms */
  readonly nodeTimeoutMs?: number | undefined
}

/** The most nodes a quorum may have: the node index of a token has 8 bits. */
export const MAX_NODES = 1 << Number(NODE_BITS)

/**
 * How long a node may take to answer an operator's read (`inspect`, `list`, `break`): no lease is timed by
 * them, so a node is given longer than a vote's `nodeTimeout` before it counts as failed. This also covers
 * a new client's first use, whose reply waits for the connection and its check (ready check, INFO, script
 * load): past a vote's 20-200 ms on a loaded machine, so `fencelock doctor`'s first inspect failed.
 */
export const OPERATOR_NODE_TIMEOUT_MS = 2000

/** The reason given to the node operations the engine stops itself (a cheap shared value, no stack). */
const STOPPED = Object.freeze({ name: 'Stopped', message: 'stopped by the quorum engine' })

/** A node's answer to an acquire after which it may hold the attempt: a grant, or no answer at all. */
const mayHold = (vote: Vote<NodeAttempt>): boolean => !vote.ok || vote.value.granted

/** The lease as the nodes know it: owned by the granting attempt's owner id (the grant's cookie). */
export const onNodes = (lease: HeldLease): HeldLease =>
  typeof lease.cookie === 'string' ? { ...lease, owner: lease.cookie } : lease

export class Quorum {
  readonly n: number
  readonly q: number
  readonly #id: string
  readonly #primitive: Primitive
  readonly #nodeTimeoutMs: number | undefined
  /** The acquires still going: each one's latest attempt and its place in the nodes' lines. */
  readonly #tickets: Tickets
  /**
   * The token of each hold this client has, by owner, for `inspect`. The nodes cannot say which node's
   * counter made the token: a node that granted after the verdict may also show M (with a lower index) or
   * more, so only the holder knows its token for sure. Removed on release and abandon.
   */
  readonly #tokens = new BoundedMap<string, bigint>(4096)
  #largestTtlMs = 0

  constructor(
    readonly nodes: readonly QuorumAdapter[],
    options: QuorumOptions,
  ) {
    if (nodes.length === 0 || nodes.length > MAX_NODES) {
      throw new TypeError(`Expected 1 to ${MAX_NODES} quorum nodes, got ${nodes.length}`)
    }
    this.n = nodes.length
    this.q = Math.floor(this.n / 2) + 1
    this.#id = options.id
    this.#primitive = options.primitive ?? 'lock'
    this.#nodeTimeoutMs = options.nodeTimeoutMs
    this.#tickets = new Tickets(this.q)
  }

  /** The largest ttl asked for so far (0 before any). */
  get largestTtlMs(): number {
    return this.#largestTtlMs
  }

  /** The timeout of rounds that are not tied to one lease but run on the acquire path (release). */
  get defaultTimeoutMs(): number {
    return this.#nodeTimeout(this.#largestTtlMs || 10_000)
  }

  async tryAcquire(request: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    this.#noteTtl(request.ttlMs)
    const timeoutMs = this.#nodeTimeout(request.ttlMs)
    // This attempt's own owner id on the nodes (see the top of this file), and its acquire's ticket.
    const req = this.#tickets.next(request)
    // The token's M once a won round decided it: a node whose grant comes later and below M is raised.
    const decided: { m?: bigint } = {}
    const { verdict, votes } = await round(
      this.n,
      timeoutMs,
      signal,
      (i, s) => this.nodes[i]!.acquire(req, s),
      (v) =>
        majorityVerdict(
          tally(v, (r) => r.granted),
          this.n,
          this.q,
        ),
      {
        // A won round stops the acquires still pending: a node not sent to yet gets nothing (the release
        // reaches the others). A lost round lets them answer, and takes back what they grant (below).
        stop: (verdict) => verdict === 'yes',
        late: (i, vote, verdict) => {
          if (verdict !== 'yes' && mayHold(vote)) void this.#cleanUp(req, [this.nodes[i]!])
          if (verdict === 'yes' && vote.ok && vote.value.granted && decided.m !== undefined) {
            if (vote.value.fence < decided.m) this.#raiseBehind(req, decided.m, [i])
          }
        },
      },
    )
    if (verdict === 'yes') return this.#recordFence(request.owner, req, votes, decided, timeoutMs, signal)
    // Draws the ticket, if the acquire has none yet, and decides when to try again.
    const retry = this.#tickets.lost(request.owner, votes, verdict === 'split', () => this.#freedIn(votes))
    // Take back what this attempt got on every node that may hold it: those that granted and those that
    // failed (the acquire may have run after their time was up) now, those still pending when they answer
    // (above). Nodes that refused hold nothing of ours. Each clean-up travels on the node's connection after
    // this attempt's acquire, so it lands after it; it names this attempt's own owner id, so however late it
    // lands it never removes the hold of a later attempt (see the top of this file).
    void this.#cleanUp(
      req,
      this.nodes.filter((_, i) => votes[i] !== undefined && mayHold(votes[i])),
    )
    if (verdict === 'unreachable') throw this.unreachable(req.key, 'acquire', votes)
    // Refused by a majority (its turn has not come, or the release has not reached a majority yet: the
    // copies of the release still to come wake it again), or split (see line.ts). What this
    // attempt took is released.
    return { granted: false, ...retry }
  }

  async extend(handle: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    this.#noteTtl(ttlMs)
    const lease = onNodes(handle)
    const { verdict, votes } = await round(
      this.n,
      this.#nodeTimeout(ttlMs),
      signal,
      (i, s) => this.nodes[i]!.extend(lease, ttlMs, s),
      (v) =>
        majorityVerdict(
          tally(v, (r) => r.renewed),
          this.n,
          this.q,
        ),
    )
    if (verdict === 'yes') return { renewed: true }
    const t = tally(votes, (r) => r.renewed)
    // Lost once so many nodes say "not ours" that no majority can hold it; anything else is unknown.
    if (t.no > this.n - this.q) return { renewed: false }
    throw this.unreachable(lease.key, 'extend', votes)
  }

  async release(handle: HeldLease, signal: AbortSignal): Promise<boolean> {
    this.#tokens.delete(handle.owner)
    const lease = onNodes(handle)
    const { votes } = await round(
      this.n,
      this.defaultTimeoutMs,
      signal,
      (i, s) => this.nodes[i]!.release(lease, s),
      // Every node gets the release at once; the answer is known when a majority says it was released
      // (the rest go on in the background, like the floor's), or when everyone has answered.
      (v) => (tally(v, (released) => released).yes >= this.q || !v.includes(undefined) ? true : undefined),
    )
    const t = tally(votes, (released) => released)
    if (t.yes >= this.q) return true
    // No longer ours on so many nodes that it no longer held a majority: it had been lost.
    if (t.no > this.n - this.q) return false
    // Most nodes never got the release: it lingers there until its ttl, which the caller should hear of.
    if (t.failed > this.n - this.q) throw this.unreachable(lease.key, 'release', votes)
    // A majority answered, the nodes in the middle of a change (some paused during the acquire, some now):
    // released wherever it was ours, and a node that missed it gets it when it answers again (same
    // connection) or lets it expire.
    return t.yes > 0
  }

  /** Removes the acquire's place in line and whatever its latest attempt may hold, on every node. */
  async abandon(request: AcquireRequest, signal: AbortSignal): Promise<void> {
    this.#tokens.delete(request.owner)
    const req = this.#tickets.latest(request)
    if (req === undefined) return
    this.#tickets.done(request.owner)
    await Promise.allSettled(this.nodes.map((node) => node.abandon(req, signal)))
    await this.#cleanUp(req)
  }

  async inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    return this.viewOf(await this.holds(key, signal))
  }

  /**
   * What each node holds for `key` (undefined: no answer), from one round that waits for every node (each
   * bounded by OPERATOR_NODE_TIMEOUT_MS). Throws when more than n - q nodes failed: nothing can be said then.
   */
  async holds(key: string, signal: AbortSignal): Promise<Array<LockInfo | null | undefined>> {
    const { votes } = await round(
      this.n,
      OPERATOR_NODE_TIMEOUT_MS,
      signal,
      (i, s) => this.nodes[i]!.inspect(key, s),
      (v) => (v.includes(undefined) ? undefined : true),
    )
    const t = tally(votes, () => true)
    if (t.failed > this.n - this.q) throw this.unreachable(key, 'inspect', votes)
    return votes.map((v) => (v?.ok ? v.value : undefined))
  }

  /** The lock as the nodes' answers (`holds`) show it, with this client's own token where it holds it. */
  viewOf(infos: ReadonlyArray<LockInfo | null | undefined>): LockInfo | null {
    return inspectVotes(infos, this.q, (owner) => this.#tokens.get(owner))
  }

  /**
   * The grant of a won round, once its token counts: M, the largest counter of the granting majority (see
   * the top of this file), written back first to enough of the majority's nodes that were behind.
   */
  async #recordFence(
    owner: string,
    req: AcquireRequest,
    votes: Votes<NodeAttempt>,
    decided: { m?: bigint },
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<AttemptResult> {
    let m = -1n
    for (const v of votes) if (v?.ok && v.value.granted && v.value.fence > m) m = v.value.fence
    decided.m = m
    const atM: number[] = []
    const behind: number[] = []
    votes.forEach((v, i) => {
      if (v?.ok && v.value.granted) (v.value.fence === m ? atM : behind).push(i)
    })
    const needed = this.q - atM.length
    // Not needed for this grant, but nodes left behind would make later grants write back.
    if (needed <= 0) this.#raiseBehind(req, m, behind)
    if (
      needed <= 0 ||
      (await this.#writeBack(req, m, behind, needed, timeoutMs, signal).catch(() => false))
    ) {
      this.#tickets.done(owner)
      const fence = (m << NODE_BITS) | BigInt(atM[0]!)
      // Bounded like the places in line: a hold whose release never reaches us must not pile up.
      this.#tokens.set(owner, fence)
      return { granted: true, fence, ttlMs: req.ttlMs, cookie: req.owner }
    }
    void this.#cleanUp(req)
    throw new QuorumError(
      `Could not record the fence of ${subjectOf(this.#primitive, req.key)} on a majority of the Redlock nodes (${this.#id}); released it. ` +
        'Check that these Redis servers are up and reachable',
      [],
      { key: req.key, backend: this.#id },
    )
  }

  /** Raises the fence counter to `m` on nodes `behind` until `needed` of them have it; false if they cannot. */
  async #writeBack(
    req: AcquireRequest,
    m: bigint,
    behind: number[],
    needed: number,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<boolean> {
    const { verdict } = await round(
      behind.length,
      timeoutMs,
      signal,
      (i, s) => this.nodes[behind[i]!]!.raiseFence(req.key, req.owner, m, s),
      (votes) => {
        const t = tally(votes, () => true)
        if (t.yes >= needed) return true
        if (t.yes + t.pending < needed) return false
        return undefined
      },
    )
    return verdict
  }

  /**
   * Raises nodes `which`, whose grant of `req` minted less than M, to M without waiting: a node's counter
   * serves every name (Redlock), and nodes left out of step would make later grants of any name pay a
   * write-back round trip. Bounded like a clean-up.
   */
  #raiseBehind(req: AcquireRequest, m: bigint, which: readonly number[]): void {
    if (which.length === 0) return
    const stop = AbortSignal.timeout(this.defaultTimeoutMs * 5)
    for (const i of which) void this.nodes[i]!.raiseFence(req.key, req.owner, m, stop).catch(() => {})
  }

  /** Held on a majority: it frees up when all but q-1 of those holds have expired. */
  #freedIn(votes: Votes<NodeAttempt>): { retryInMs?: number } {
    const pttls: number[] = []
    for (const v of votes) {
      if (v?.ok && !v.value.granted && v.value.retryInMs !== undefined) pttls.push(v.value.retryInMs)
    }
    pttls.sort((a, b) => a - b)
    const at = pttls[pttls.length - this.q]
    return at === undefined ? {} : { retryInMs: at }
  }

  /**
   * Releases `owner`'s hold (owner-checked) on the given nodes, without waiting: after a failed attempt.
   * Each node's release travels on the same connection after that node's acquire, so it lands after it.
   * Bounded by five default timeouts, so a node that never answers does not keep it.
   */
  #cleanUp(lease: { key: string; owner: string }, which: readonly QuorumAdapter[] = this.nodes) {
    if (which.length === 0) return Promise.resolve()
    const stop = new AbortController()
    const timer = setTimeout(() => stop.abort(STOPPED), this.defaultTimeoutMs * 5)
    timer.unref()
    const held: HeldLease = { key: lease.key, owner: lease.owner, fence: 0n, cookie: undefined }
    return Promise.allSettled(which.map((node) => node.cleanUp(held, stop.signal))).finally(() =>
      clearTimeout(timer),
    )
  }

  /** Every node's failure in a round (a node that had not answered counts as "no reply yet"). */
  #failures<T>(votes: Votes<T>): NodeFailure[] {
    return votes.flatMap((v, i) =>
      v === undefined
        ? [{ node: this.nodes[i]!.id, error: new Error(NO_REPLY_YET) }]
        : v.ok
          ? []
          : [{ node: this.nodes[i]!.id, error: v.error }],
    )
  }

  /**
   * The error of a round no majority could answer. Short enough to read: nodes failing for the same reason
   * share one entry (each node's error is in `failures`); the closing hint only when some reason is a bare
   * network or timeout error (a LockError from a node already says what to do or when it will vote, and a
   * node that had not answered yet when the others settled the round is no sign of trouble).
   */
  unreachable<T>(key: string, what: string, votes: Votes<T>): QuorumError {
    const list = this.#failures(votes)
    const byReason = new Map<string, string[]>()
    for (const f of list) {
      const reason = String((f.error as Error)?.message ?? f.error)
      const nodes = byReason.get(reason) ?? []
      nodes.push(f.node.replace(/^[a-z]+:\/\//, ''))
      byReason.set(reason, nodes)
    }
    const reasons = [...byReason].map(([reason, nodes]) => `${nodes.join(', ')}: ${reason}`).join('; ')
    const hint = list.some(
      (f) => !(f.error instanceof LockError || (f.error as Error)?.message === NO_REPLY_YET),
    )
      ? '. Check that they are up and reachable'
      : ''
    return new QuorumError(
      `Could not ${what} ${subjectOf(this.#primitive, key)}: ${list.length} of ${this.n} Redlock nodes failed, a majority (${this.q}) ` +
        `is needed. ${reasons}${hint}`,
      list,
      { key, backend: this.#id },
    )
  }

  #noteTtl(ttlMs: number): void {
    if (ttlMs > this.#largestTtlMs) this.#largestTtlMs = ttlMs
  }

  #nodeTimeout(ttlMs: number): number {
    return this.#nodeTimeoutMs ?? Math.min(200, Math.max(20, Math.round(ttlMs / 100)))
  }
}
