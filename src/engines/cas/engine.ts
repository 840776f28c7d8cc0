/**
 * The cas-lease engine: a lock as ONE record per key on a store with conditional writes (S3, GCS,
 * DynamoDB), replaced only by a write conditioned on the version we read. Model: the DynamoDB lock client
 * (`amazon-dynamodb-lock-client`), with a fence added and released records retired (deleted).
 *
 * - Record (record.ts): owner, fence, lease, held/released, holder, and a fresh nonce per write.
 * - Grant: absent → create a placeholder marked fresh and answer "not yet" (`pending`): the same
 *   acquire's next attempt, once the store's clock settles the placeholder's fence, replaces it
 *   unmarked, and that write is the grant (fence.ts: a record deleted and made again at any age never
 *   repeats a fence). No attempt waits for the clock: the core's loop does, between attempts, as it
 *   waits for a holder. Released → replace on its version (the next fence, once settled);
 *   held by us (an earlier attempt of this acquire whose reply was lost) → replace on its version, its
 *   fence kept (lifted, when still fresh), so the validity counts from this write; held
 *   by another → a takeover (the next fence) only once this process has seen that same version
 *   unchanged for the record's lease plus a margin, on its own monotonic clock (observe.ts says when
 *   the observation starts, and why that is safe). No client's wall clock is read or written anywhere
 *   (the server's only lifts fences): clocks may jump; only a waiter whose clock RATE runs faster than
 *   the margin allows could take over early.
 * - Fence (fence.ts): advanced by the very conditional write that grants, kept by renewals and
 *   releases; every version of the record descends from the one before, so fences never go back while it
 *   exists. Each grant also lifts it to an epoch of the SERVER's clock (the `Date` of the read that
 *   decided it), and is sent only once that clock has caught up with it, so a record deleted (by us
 *   or behind our back) and made again starts above every earlier fence.
 * - Renewal: a replace on our last version (new nonce, same fence); the holder's validity counts from
 *   before that write was sent (the core does it), which precedes every waiter's observation of it.
 * - Uncertain outcomes (write.ts): re-read, and our owner with this write's nonce means it landed.
 * - Release: a replace that marks the record released (fence kept), free at once for the next writer,
 *   and deleted by the retirer when nobody here took it again for a few seconds (retire.ts): the
 *   store keeps the locks held or recently held, not every name ever used.
 * - List and break (operations.ts): the held records of a prefix, a page of the store at a time
 *   (what a listed lease's `expiresInMs` can mean is said there); a break is a release's write without
 *   the owner check, so the holder's next renewal fails.
 * - Waiting: no notifications. Reads of a key held by another are paced per process: 100 ms, doubling
 *   to `pollMaxMs` (1 s), and never later than the moment a takeover becomes possible; attempts in
 *   between are answered from what was seen, without a request, and attempts that do read share one
 *   read in flight per key (reads.ts), so the process's waiters of a key cost the reads of one. A
 *   refused write whose re-read still shows the version it was conditioned on (a store whose reads lag
 *   its writes) makes writes on that version back off: 100 ms doubling up to a third of the record's
 *   lease (at least `pollMaxMs`), until a write of ours lands. A write of one key from this process is
 *   never sent sooner than the adapter's `minWriteIntervalMs` (GCS: about one per second per object)
 *   after the previous one was answered (the server may apply it until then): a write due sooner (a
 *   release right after the grant) waits for it; 429/503 are the adapter's retryable errors, on which
 *   the core backs off.
 *
 * Requests (R = strongly consistent read, W = conditional write), without faults:
 * - acquire, released key: 1 R + 1 W; new key (none, or retired): 2 R + 2 W in two attempts, 1 to 2 s
 *   apart, while the store's clock ticks twice; takeover after a crash: the waiting reads + 1 W;
 * - renewal (every ttl/3 by default): 1 W; release: 1 W, then 1 D (conditional delete) if the key is
 *   not taken again here within a few seconds;
 * - waiting, per minute, per process and key, however many of its acquires wait for it (a burst of new
 *   ones costs two reads: one in flight, one sent after them): 60 R at the default `pollMaxMs` of 1 s
 *   (64 in the first minute, while the pace ramps up from 100 ms), plus 1 W per takeover or release
 *   seen (one grant write of a key in flight per process: its other waiters wait for its outcome);
 *   `inspect` is 1 R; resume: 2 R + 1 W;
 * - a refused or unknown write: + 1 R (none on DynamoDB, whose refusal returns the record);
 * - abandon of an acquire that sent a write: 1 R, + 1 W if that write left the record ours, or could
 *   still land on the record found (hold.ts).
 * - break: 1 R + 1 W (a write lost to a renewal: + 1 R, again); list: the adapter's listing (each
 *   backend's header says what it reads).
 *
 * - Atomic sets (`attemptAll`, where the adapter has `transact`: DynamoDB): every key decided as
 *   `attempt` decides it alone, and only when all are free to write, their writes in ONE transaction of
 *   the store; a set with a new key places first (its placeholders and the others' records held by us,
 *   ungranted, in one transaction) and grants once their fences settle. Every key's fence, observation
 *   and placeholder is the single-key path's own; abandon is per key, as after any attempt.
 * - Resume (resume.ts): a lock continued from its token, while its lease is live by the store's clock.
 * - Elections (election.ts): the engine again, over an adapter of the elections' own namespace.
 *
 * Adapter: `CasAdapter` (adapter.ts). Used by: S3, GCS, DynamoDB (src/backends/{s3,gcs,dynamodb}).
 */

import { setMaxListeners } from 'node:events'
import { raceSignal } from '../../core/abort.js'
import type {
  AcquireRequest,
  AllAttemptResult,
  AttemptResult,
  BackendCapabilities,
  Busy,
  Grant,
  LeaseFacet,
  LockInfo,
  ResumeFacet,
} from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { now } from '../../core/clock.js'
import type { CasAdapter } from './adapter.js'
import { freshGrantFence, grantFence, newRecordFence, type ServerClock, settled, settlesAt } from './fence.js'
import { type CasHold, CasHolds } from './hold.js'
import { type Observation, Observations, POLL_FIRST_MS } from './observe.js'
import { CasOperations, recordView } from './operations.js'
import { type CasRecord, heldBy, newNonce } from './record.js'
import { casResume } from './resume.js'
import { CasRetirer } from './retire.js'
import { type AllWriteOutcome, CasIo, type KeyWrite } from './write.js'

export type { CasHold } from './hold.js'

export interface CasLeaseOptions {
  /** The backend's id in errors and diagnostics. @default the adapter's id */
  readonly id?: string | undefined
  /**
   * What a waiter adds to a record's lease before it takes over, in ms: covers the waiter's clock
   * running faster than the holder's. @default 5 % of the lease, at least 200 ms
   */
  readonly marginMs?: number | undefined
  /** The longest time between two reads of a key held by another. @default 1000 */
  readonly pollMaxMs?: number | undefined
}

const MARGIN_SHARE = 0.05
const MARGIN_MIN_MS = 200
const POLL_MAX_MS = 1000
/**
 * Owners of acquires remembered (whether they wrote, for abandon; whether they wait, for the pacing);
 * forgetting one costs a request, never safety.
 */
const WRITERS_KEPT = 10_000
/**
 * A placeholder's lease is the ttl, and at least this: its creator comes back once the store's clock has
 * ticked twice (up to 2 s, and round trips) to grant, and a shorter lease would let a waiter take the
 * placeholder over meanwhile, only to wait likewise. No longer than that: a creator cut off during its
 * wait leaves the placeholder held, and every waiter sits out its lease.
 */
const SETTLE_ALLOWANCE_MS = 3000
/** The least wait between two reads of the store's clock while a placeholder of ours settles. */
const SETTLE_POLL_MIN_MS = 100

/** Leases end by a waiter's observation; no notifications, no order among waiters. */
const CAPABILITIES: BackendCapabilities = { expiry: 'observed', notify: false, fifo: false }

/** The leased methods of `engine` over `adapter`'s records: the mutex's, or an election's (election.ts). */
export function casLeaseFacet(engine: CasLease, adapter: CasAdapter, id: string): LeaseFacet {
  return {
    id,
    capabilities: CAPABILITIES,
    // A new record's grant waits for the store's clock between its two attempts: the core gives it that
    // time also past a shorter timeout (`Busy.pending`), so every attempt keeps the adapter's own bound.
    limits: adapter.limits,
    tryAcquire: (req, signal) => engine.attempt(req, signal),
    extend: (lease, ttlMs, signal) => engine.holds.extend(lease, ttlMs, signal),
    release: (lease, signal) => engine.holds.release(lease, signal),
    inspect: (key, signal) => engine.inspect(key, signal),
    abandon: (req, signal) => engine.abandon(req, signal),
  }
}

/** A grant to write: its fence, and whether it is made on a new (or still fresh) record. */
interface GrantPlan {
  readonly fence: bigint
  readonly fresh: boolean
}

/** What one attempt at a key does (`#decide`): answer at once, or write a grant (a placeholder when fresh). */
type Step =
  | { readonly kind: 'answer'; readonly result: AttemptResult }
  | { readonly kind: 'write'; readonly grant: GrantPlan; readonly seen: Observation | undefined }

/** The placeholder map's key of an acquire's key: an atomic set's acquire places one per key. */
function placeOf(req: AcquireRequest): string {
  return `${req.owner}\n${req.key}`
}

/** A placeholder this acquire wrote (marked fresh), to be replaced by the grant once its fence settles. */
interface Placeholder {
  readonly version: string
  /** The fence its grant takes (fence.ts): at least the placeholder's own. */
  readonly fence: bigint
  /** When its write was answered: the read that decides its grant is sent after. */
  readonly placedAt: number
  /** No read of it before this: the store's clock cannot have settled its fence sooner. */
  readonly readAt: number
}

export class CasLease {
  /** Names the store in errors. */
  readonly id: string
  readonly #adapter: CasAdapter
  readonly #seen: Observations
  readonly #io: CasIo
  /** Extend, release and abandon: what a holder (or a failed acquire) does to its own record. */
  readonly holds: CasHolds
  /** List and break: what an operator does (operations.ts). */
  readonly operations: CasOperations
  /** Deletes of released records the fence rule does not allow yet (retire.ts). */
  readonly retirer: CasRetirer
  /** A held lock continued from its token in another process (resume.ts). */
  readonly resume: ResumeFacet
  /** Owners whose acquire sent a write, with the versions its replaces were conditioned on (abandon). */
  readonly #writers = new BoundedMap<string, Set<string>>(WRITERS_KEPT)
  /** Owners whose acquire has read the record at least once: their next attempts may be paced. */
  readonly #waiting = new BoundedMap<string, true>(WRITERS_KEPT)
  /**
   * The placeholders acquires wrote (marked fresh), by owner and key (`placeOf`), each turned into the
   * grant by its acquire's next attempt (see `attempt`).
   */
  readonly #placed = new BoundedMap<string, Placeholder>(WRITERS_KEPT)
  /** The grant write of each key in flight from this process, settled when it is (see `#write`). */
  readonly #granting = new Map<string, Promise<void>>()

  constructor(adapter: CasAdapter, options: CasLeaseOptions = {}) {
    this.#adapter = adapter
    this.id = options.id ?? adapter.id
    const margin = options.marginMs
    if (margin !== undefined && !(margin >= 0)) {
      throw new TypeError(`Expected \`marginMs\` to be a number >= 0, got ${String(margin)}`)
    }
    if (options.pollMaxMs !== undefined && !(options.pollMaxMs > 0)) {
      throw new TypeError(`Expected \`pollMaxMs\` to be a number > 0, got ${String(options.pollMaxMs)}`)
    }
    this.#seen = new Observations(options.pollMaxMs ?? POLL_MAX_MS, (leaseMs) =>
      margin !== undefined ? margin : Math.max(MARGIN_MIN_MS, leaseMs * MARGIN_SHARE),
    )
    this.#io = new CasIo(adapter, this.#seen)
    this.retirer = new CasRetirer(this.#io)
    this.holds = new CasHolds(this.#io, this.#writers, this.retirer)
    this.operations = new CasOperations(this.#io)
    this.resume = casResume(this.#io)
  }

  /** One attempt (`LockBackend.tryAcquire`). Never waits for the holder. */
  async attempt(req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
    const step = await this.#decide(req, signal)
    return step.kind === 'answer' ? step.result : await this.#write(req, step.grant, step.seen, signal)
  }

  /**
   * One attempt at every key of an atomic set (`MultiKeyFacet.tryAcquireAll`, on an adapter with
   * `transact`): each key decided as `attempt` decides it alone, and the keys' writes sent in ONE
   * transaction of the store, or none. Only when every key is free to write: a key held by another (or
   * our grant of it settling) answers for the whole set, with nothing written. A set with a key to make
   * new (or still marked fresh) first writes, in one transaction, placeholders of those keys and the
   * others' records held by us, ungranted; its next attempt, once the store's clock has settled their
   * fences, grants them all in one transaction, as `attempt` grants one key (fence.ts: why a new
   * record's grant waits). Every key's fence is its own rule's.
   */
  async attemptAll(reqs: readonly AcquireRequest[], signal: AbortSignal): Promise<AllAttemptResult> {
    // Every key's read listens on the attempt's signal at once (a set may have 100 keys): no leak.
    setMaxListeners(0, signal)
    const steps = await Promise.all(reqs.map((req) => this.#decide(req, signal)))
    const answers = steps.flatMap((step) => (step.kind === 'answer' ? [step.result as Busy] : []))
    if (answers.length > 0) return setAnswer(answers)
    const writes = steps as Extract<Step, { kind: 'write' }>[]
    // A grant write of one of the keys in flight from this process: its outcome first (see `#write`).
    const other = reqs.map((req) => this.#granting.get(req.key)).find((each) => each !== undefined)
    if (other !== undefined) {
      await raceSignal(other, signal)
      return { granted: false, retryInMs: 0 }
    }
    const placing = writes.some(({ grant }) => grant.fresh)
    if (!placing) {
      // Fences the store's clock has not settled yet: the set's grant waits for the last of them.
      const serverSecond = this.#io.serverSecond
      const due = writes.flatMap(({ grant }, i) =>
        settled(grant.fence, serverSecond) ? [] : [this.#settling(reqs[i]!, grant.fence)],
      )
      if (due.length > 0) return settling(Math.max(...due) - now())
    }
    const sent = writes.map(({ grant, seen }, i) => {
      const req = reqs[i]!
      // Placing: every record keeps the set for its creator until the grant, as a placeholder's lease does.
      const leaseMs = placing ? Math.max(req.ttlMs, SETTLE_ALLOWANCE_MS) : req.ttlMs
      const fields = { fence: grant.fence, leaseMs, ...(grant.fresh ? { fresh: true as const } : {}) }
      return { key: req.key, record: this.#recordOf(req, fields), version: seen?.version }
    })
    const answered: ServerClock = {}
    const out = await this.#writeAll(reqs, writes, sent, signal, answered)
    if (out.kind === 'unknown') throw out.error
    if (out.kind === 'refused') return this.#refusedAll(reqs, out.conflict)
    const { versions } = out
    if (placing) {
      const due = writes.flatMap(({ grant, seen }, i) => {
        if (!grant.fresh) return []
        const fence = this.#placedFence(reqs[i]!, grant.fence, seen, answered)
        return [this.#placeAt(reqs[i]!, versions[i]!, fence)]
      })
      return settling(Math.max(...due) - now())
    }
    const grants = reqs.map((req, i) =>
      this.#granted(req, writes[i]!.grant.fence, versions[i]!, sent[i]!.record.nonce),
    )
    return { granted: true, grants }
  }

  /**
   * Sends the set's writes in one transaction, once the store's write rate allows each key's, as the
   * process's one grant write in flight of every key (see `#write`).
   */
  async #writeAll(
    reqs: readonly AcquireRequest[],
    writes: readonly { readonly seen: Observation | undefined }[],
    sent: readonly KeyWrite[],
    signal: AbortSignal,
    answered: ServerClock,
  ): Promise<AllWriteOutcome> {
    const sending = (async () => {
      for (const req of reqs) await this.#io.paced(req.key, signal)
      // Before it is sent: from here on it may land at any time, even after the core gave up on it.
      for (const [i, req] of reqs.entries()) this.#sending(req.owner, writes[i]!.seen)
      return await this.#io.writeAll(sent, signal, answered)
    })()
    const done = sending.then(
      () => {},
      () => {},
    )
    for (const req of reqs) this.#granting.set(req.key, done)
    try {
      return await sending
    } finally {
      for (const req of reqs) if (this.#granting.get(req.key) === done) this.#granting.delete(req.key)
    }
  }

  /**
   * A set's transaction refused: another transaction on one of its records (soon again), or a condition
   * failed: back when the first key held by another may be read again or taken over (at once when none
   * is: a record of ours, or one freed since, is decided anew).
   */
  #refusedAll(reqs: readonly AcquireRequest[], conflict: boolean): Busy {
    // Spread, so that the transactions that met do not meet again at once.
    if (conflict) return { granted: false, retryInMs: Math.round(POLL_FIRST_MS * (0.5 + Math.random())) }
    const waits = reqs.flatMap((req) => {
      const seen = this.#seen.get(req.key)
      return seen && this.#othersHold(seen, req.owner) ? [this.#busy(seen).retryInMs ?? 0] : []
    })
    return { granted: false, retryInMs: waits.length > 0 ? Math.min(...waits) : 0 }
  }

  /**
   * What an attempt at `req.key` does, from what this process has seen or a read now shows: answer at
   * once (held by another, our own grant settling), or write `grant` over `seen` (undefined: a create).
   * Shared by `attempt` and `attemptAll`, so that a key of an atomic set is decided exactly as alone.
   */
  async #decide(req: AcquireRequest, signal: AbortSignal): Promise<Step> {
    const answer = (result: AttemptResult): Step => ({ kind: 'answer', result })
    const write = (grant: GrantPlan, seen: Observation | undefined): Step => ({ kind: 'write', grant, seen })
    const start = now()
    // Taken again here: its released record is written over, not deleted.
    this.retirer.cancel(req.key)
    const placed = this.#placed.get(placeOf(req))
    // Our placeholder, whose fence the store's clock cannot have settled yet: nothing to ask.
    if (placed !== undefined && start < placed.readAt) return answer(settling(placed.readAt - start))
    const known = this.#seen.get(req.key)
    const waiting = this.#waiting.has(req.owner)
    if (waiting) {
      // A write on what we see was refused while our reads kept showing it (a lagging store): nothing
      // new to try before its backoff ends, and a read now would most likely show the same.
      const lagging = this.#seen.laggingUntil(req.key, known?.version, start)
      if (lagging !== undefined) return answer({ granted: false, retryInMs: lagging - start })
      // Seen held by another a moment ago, too recently to read again: the answer is the same, free. Only
      // for an acquire already waiting: a new one (a `tryAcquire` just after a release elsewhere) reads.
      if (known && start < known.nextReadAt && this.#othersHold(known, req.owner)) {
        return answer(this.#busy(known))
      }
    }
    // The server's second of this read decides the fence of a grant made on what it returns (fence.ts).
    // A waiter takes any read of the key in flight (what it shows is observed at its return, whoever sent
    // it: observe.ts); a new acquire only one sent after it began, which a release before it shows.
    // Our placeholder's grant is decided by a read sent after it was written (one in flight before
    // could show the key as it was).
    const clock: ServerClock = {}
    const notBefore = placed?.placedAt ?? (waiting ? Number.NEGATIVE_INFINITY : start)
    const { current, seen } = await this.#io.observe(req.key, signal, clock, notBefore)
    if (!waiting) this.#waiting.set(req.owner, true)
    const { id } = this
    const seconds = clock.seconds
    const lift = seconds !== undefined
    // None: a create, marked fresh when the store shows its clock (a grant only once settled: fence.ts).
    if (current === undefined || seen === undefined) {
      this.#placed.delete(placeOf(req))
      return write({ fence: newRecordFence(seconds, req.key, id), fresh: lift }, undefined)
    }
    const record = seen.record
    // Our placeholder as we left it: the grant, with the fence we chose for it, once that is settled.
    if (placed !== undefined && seen.version === placed.version && heldBy(record, req.owner)) {
      return write({ fence: placed.fence, fresh: false }, seen)
    }
    this.#placed.delete(placeOf(req))
    // Not a record of ours: its fence is unknown, so it is never overwritten (inspect says so).
    if (record === undefined) return answer(this.#busy(seen))
    // A record still marked fresh may carry the fence of a create that landed late: lifted first.
    const fresh = lift && record.fresh === true
    const next = (): GrantPlan => ({
      fence: (fresh ? freshGrantFence : grantFence)(record.fence, seconds, req.key, id),
      fresh,
    })
    if (record.state === 'released') return write(next(), seen)
    // Ours: an earlier attempt of this acquire landed after all. Written again, so that the validity
    // the core counts from this attempt's start is really the lease's (waiters restart their watch).
    // Still fresh (a placeholder whose answer we never heard): its fence is lifted as a new record's.
    if (record.owner === req.owner) {
      const fence = fresh ? freshGrantFence(record.fence, seconds, req.key, id) : record.fence
      return write({ fence, fresh }, seen)
    }
    // Another's, seen unchanged for a whole lease plus the margin: its holder cannot count on it any
    // more (it counted its validity from before the write we have been watching), so it is taken over.
    const takeoverAt = this.#seen.takeoverAt(seen)!
    if (now() < takeoverAt) return answer(this.#busy(seen))
    return write(next(), seen)
  }

  /** `LockBackend.abandon`: the acquire is over; what it may have left is released (hold.ts). */
  abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    this.#waiting.delete(req.owner)
    this.#placed.delete(placeOf(req))
    return this.holds.abandon(req, signal)
  }

  /** `LockBackend.inspect`: the record as stored, with what this process has seen of it (operations.ts). */
  async inspect(key: string, signal: AbortSignal): Promise<LockInfo | null> {
    const { seen } = await this.look(key, signal)
    if (seen === undefined) return null
    return recordView(seen.record, now() - seen.since, this.#adapter.id)
  }

  /**
   * A read of `key` sent now: what this process has seen of its record (undefined: none), and from when
   * it would take a held one over (observe.ts; undefined when not held or unreadable).
   */
  async look(
    key: string,
    signal: AbortSignal,
  ): Promise<{ readonly seen: Observation | undefined; readonly takeoverAt: number | undefined }> {
    const { seen } = await this.#io.observe(key, signal)
    return { seen, takeoverAt: seen && this.#seen.takeoverAt(seen) }
  }

  /**
   * A grant by writing our record (`grant.fence`) over `seen` (undefined: a create), or, on a record
   * made new or still marked fresh, our placeholder; or why not.
   */
  async #write(
    req: AcquireRequest,
    grant: GrantPlan,
    seen: Pick<Observation, 'version'> | undefined,
    signal: AbortSignal,
  ): Promise<AttemptResult> {
    // One grant write of a key in flight per process: the other acquires of the key wait for its outcome
    // and try again (it landed: the record it left is held, and they are answered from it without a
    // request; it did not: they read). All at once, every waiter that saw a release (or a takeover
    // due) would write, and all but one be refused: 100 waiters, 100 writes and their re-reads.
    const other = this.#granting.get(req.key)
    if (other !== undefined) {
      await raceSignal(other, signal)
      return { granted: false, retryInMs: 0 }
    }
    const granting = grant.fresh
      ? this.#place(req, grant.fence, seen, signal)
      : this.#grant(req, grant.fence, seen, signal)
    const done = granting.then(
      () => {},
      () => {},
    )
    this.#granting.set(req.key, done)
    try {
      return await granting
    } finally {
      if (this.#granting.get(req.key) === done) this.#granting.delete(req.key)
    }
  }

  /** `#write` of a settled fence: the grant is this one write (else a later attempt, once it settles). */
  async #grant(
    req: AcquireRequest,
    fence: bigint,
    seen: Pick<Observation, 'version'> | undefined,
    signal: AbortSignal,
  ): Promise<AttemptResult> {
    // A fence the store's clock has not settled yet (a record granted on less than about 2 s ago, or
    // our placeholder): the grant waits until an answer shows it settled (fence.ts), any answer of this
    // process, since every one came before this write would be sent.
    if (!settled(fence, this.#io.serverSecond)) {
      return settling(this.#settling(req, fence) - now())
    }
    const out = await this.#put(req, { fence, leaseMs: req.ttlMs }, seen, signal)
    if (out.kind !== 'written') return out.result
    return this.#granted(req, fence, out.version, out.nonce)
  }

  /**
   * `#write` on a record made new (or still marked fresh): a placeholder marked fresh (no grant, a lease
   * of the ttl and at least `SETTLE_ALLOWANCE_MS`, so that nobody takes it while we wait), remembered
   * for this acquire's next attempt, which replaces it unmarked once the store's clock has settled its
   * fence: that is the grant (fence.ts says why nothing shorter is safe).
   */
  async #place(
    req: AcquireRequest,
    fence: bigint,
    seen: Pick<Observation, 'version'> | undefined,
    signal: AbortSignal,
  ): Promise<AttemptResult> {
    const leaseMs = Math.max(req.ttlMs, SETTLE_ALLOWANCE_MS)
    const answered: ServerClock = {}
    const out = await this.#put(req, { fence, leaseMs, fresh: true }, seen, signal, answered)
    if (out.kind !== 'written') return out.result
    return settling(this.#placeAt(req, out.version, this.#placedFence(req, fence, seen, answered)) - now())
  }

  /**
   * When the store's clock has settled `fence` at the latest, on our monotonic clock (never sooner than
   * `SETTLE_POLL_MIN_MS` from now): it showed at least `serverSecond` when an answer first showed it,
   * so it reaches the fence's second at most that many seconds later.
   */
  #settlesBy(fence: bigint): number {
    const { serverSecond, serverSecondSince } = this.#io
    const t = now()
    if (serverSecond === undefined) return t
    return Math.max(t + SETTLE_POLL_MIN_MS, serverSecondSince + (settlesAt(fence) - serverSecond) * 1000)
  }

  /** The fence the grant of a placeholder written over `seen` (undefined: a create) with `fence` takes. */
  #placedFence(
    req: AcquireRequest,
    fence: bigint,
    seen: Pick<Observation, 'version'> | undefined,
    answered: ServerClock,
  ): bigint {
    // A create may have landed long after its read (fence.ts): the fence of its answer's second.
    const byAnswer = seen === undefined ? newRecordFence(answered.seconds, req.key, this.id) : 0n
    return byAnswer > fence ? byAnswer : fence
  }

  /**
   * Notes our placeholder of `req.key` at `version`, whose grant takes `fence` once it is settled;
   * returns when that grant's read is due.
   */
  #placeAt(req: AcquireRequest, version: string, fence: bigint): number {
    const placedAt = now()
    const readAt = this.#settlesBy(fence)
    this.#placed.set(placeOf(req), { version, fence, placedAt, readAt })
    return readAt
  }

  /** A grant of `fence` the store's clock has not settled yet: when to come back (noted on our placeholder). */
  #settling(req: AcquireRequest, fence: bigint): number {
    const readAt = this.#settlesBy(fence)
    const placed = this.#placed.get(placeOf(req))
    if (placed !== undefined) this.#placed.set(placeOf(req), { ...placed, readAt })
    return readAt
  }

  #granted(req: AcquireRequest, fence: bigint, version: string, nonce: string): Grant {
    this.#waiting.delete(req.owner)
    this.#placed.delete(placeOf(req))
    const hold: CasHold = {
      version,
      leaseMs: req.ttlMs,
      holder: req.holder,
      value: req.value,
      nonces: new Set([nonce]),
    }
    return { granted: true, fence, ttlMs: req.ttlMs, cookie: hold }
  }

  /** Our record of `req.key` held with `fields`, with a fresh nonce. */
  #recordOf(req: AcquireRequest, fields: Pick<CasRecord, 'fence' | 'leaseMs' | 'fresh'>): CasRecord {
    return {
      owner: req.owner,
      state: 'held',
      holder: req.holder,
      nonce: newNonce(),
      ...(req.value === undefined ? {} : { value: req.value }),
      ...fields,
    }
  }

  /** Notes, before a write is sent, that `owner` may leave a record there from now on (abandon reads it). */
  #sending(owner: string, seen: Pick<Observation, 'version'> | undefined): void {
    const conditioned = this.#writers.get(owner) ?? new Set<string>()
    if (seen !== undefined) conditioned.add(seen.version)
    this.#writers.set(owner, conditioned)
  }

  /** One write of our record held over `seen` (undefined: a create): its version, or the attempt's answer. */
  async #put(
    req: AcquireRequest,
    fields: Pick<CasRecord, 'fence' | 'leaseMs' | 'fresh'>,
    seen: Pick<Observation, 'version'> | undefined,
    signal: AbortSignal,
    answered?: ServerClock,
  ): Promise<
    | { readonly kind: 'written'; readonly version: string; readonly nonce: string }
    | { readonly kind: 'not'; readonly result: AttemptResult }
  > {
    // The store's write rate (GCS: about one write per second per object). If the record changes
    // meanwhile, the write's condition says so.
    await this.#io.paced(req.key, signal)
    const record = this.#recordOf(req, fields)
    // Before it is sent: from here on it may land at any time, even after the core gave up on it.
    this.#sending(req.owner, seen)
    const out = await this.#io.write(req.key, record, seen?.version, signal, answered)
    if (out.kind === 'written') return { kind: 'written', version: out.version, nonce: record.nonce }
    // It may still land: unknown to the core too, which counts a later grant's validity from here.
    if (out.kind === 'unknown') throw out.error
    const not = (result: AttemptResult) => ({ kind: 'not' as const, result })
    // An earlier attempt of ours landed meanwhile: the next attempt writes it again (see `attempt`).
    if (heldBy(out.record, req.owner)) return not({ granted: false, retryInMs: 0 })
    if (out.lagging) {
      // Refused, and the read behind it still shows what we wrote on: the store's reads lag its writes.
      // The next write on that version waits, a little longer each time, up to the holder's renewal
      // interval (a third of its lease; at least the longest poll): the record has moved on, and
      // only reads that caught up can say to what (observe.ts).
      const capMs = Math.max(this.#seen.pollMaxMs, (out.record?.leaseMs ?? 0) / 3)
      const t = now()
      return not({ granted: false, retryInMs: this.#seen.lagging(req.key, seen?.version, capMs, t) - t })
    }
    const after = this.#seen.get(req.key)
    return not(after ? this.#busy(after) : { granted: false, retryInMs: 0 })
  }

  /** Whether `seen` is a record held by someone other than `owner` (or unreadable). */
  #othersHold(seen: Observation, owner: string): boolean {
    const record = seen.record
    return record === undefined || (record.state === 'held' && record.owner !== owner)
  }

  /**
   * Refused: come back at the next read this process allows itself, which is never later than the
   * moment a takeover becomes possible, and not before the store allows a takeover write.
   */
  #busy(seen: Observation): Busy {
    const t = now()
    const takeoverAt = this.#seen.takeoverAt(seen)
    let at = seen.nextReadAt
    if (takeoverAt !== undefined)
      at = Math.min(at, Math.max(takeoverAt, t + this.#adapter.minWriteIntervalMs))
    return { granted: false, retryInMs: Math.max(0, at - t) }
  }
}

/** Not granted yet, and not for want of a holder: our own grant waits `retryInMs` for the store's clock. */
function settling(retryInMs: number): Busy {
  return { granted: false, pending: true, retryInMs: Math.max(0, retryInMs) }
}

/**
 * An atomic set's answer from its keys' (none written): busy until the first key held by another may be
 * looked at again; when only our own grants are settling, pending until the last of them is due.
 */
function setAnswer(answers: readonly Busy[]): Busy {
  const busy = answers.filter((answer) => !answer.pending)
  if (busy.length > 0) return { granted: false, retryInMs: Math.min(...busy.map((b) => b.retryInMs ?? 0)) }
  return settling(Math.max(...answers.map((answer) => answer.retryInMs ?? 0)))
}
