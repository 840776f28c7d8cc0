/**
 * What a holder does to its own `cas-lease` record (extend, release), and what an acquire that gave up
 * does to whatever it may have left there (abandon). Every write is conditioned on the version our latest
 * known write left; a refusal is judged by the record as it is now (write.ts), so that a renewal of
 * ours whose reply was lost, and which landed after all, is recognised as this hold's (owner, fence, and
 * the nonce of one of its own writes) and not taken for a loss.
 */
import type { AcquireRequest, ExtendResult, HeldLease, ProclaimResult } from '../../core/backend.js'
import type { BoundedMap } from '../../core/bounded-map.js'
import { BackendUnavailableError, quoteKey } from '../../core/errors.js'
import { newRecordFence, type ServerClock } from './fence.js'
import { type CasRecord, type CasState, decodeRecord, heldBy, newNonce } from './record.js'
import { answeredBefore, leaseEnded, resumableUntil } from './resume.js'
import type { CasRetirer } from './retire.js'
import type { CasIo, WriteOutcome } from './write.js'

/** The cookie of a cas-lease grant: what we know of our record. Updated in place by extend and release. */
export interface CasHold {
  /** The record's version as our latest write that we know of left it. */
  version: string
  /** The lease our latest known write asked for (a release writes it again). */
  leaseMs: number
  readonly holder: string | undefined
  /** An election leader's value, which every write of the hold carries (election.ts); undefined on a lock. */
  value: string | undefined
  /**
   * The nonces of this hold's writes since its last confirmed one (that one included): a record of our
   * owner and fence is this hold's only with one of them. Another attempt of the same acquire may have
   * written it again (a grant whose answer came too late, released by the core, while the next attempt
   * found the record and took it): owner and fence alone would let the late grant's release, or its
   * renewal, act on the lock the core took.
   */
  nonces: Set<string>
  /**
   * Set on a hold made by a resume (resume.ts) until its first write lands: that write must be answered
   * before this moment of the store's clock (ms since 1970), the end of the lease it continues.
   */
  resumableUntil?: number | undefined
}

/** Writes one release or abandon makes at most, when the record keeps moving under our own late writes. */
const TRIES = 3

export class CasHolds {
  readonly #io: CasIo
  /**
   * Owners whose acquire sent a write (engine.ts), with the versions its replaces were conditioned on:
   * only they can have left a record to abandon, or still have a write in flight that could land.
   */
  readonly #writers: BoundedMap<string, Set<string>>
  /** Where a released record waits until the store's clock allows its delete (retire.ts). */
  readonly #retirer: CasRetirer

  constructor(io: CasIo, writers: BoundedMap<string, Set<string>>, retirer: CasRetirer) {
    this.#io = io
    this.#writers = writers
    this.#retirer = retirer
  }

  /**
   * `LockBackend.extend`: a replace of our record on our last version (new nonce, same fence). A resumed
   * hold's first one is checked against the end of the lease it continues (resume.ts), and follows the
   * original holder's renewals that land between the resume's read and its write (a few at most).
   */
  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    const hold = lease.cookie as CasHold
    for (let i = 0; i < TRIES; i++) {
      // Too soon after our last write's answer for the store's write rate: wait for it (the core's
      // validity counts from before this call, before the write is sent, so the wait only makes it more
      // conservative). Bounded: at most minWriteIntervalMs, and by the signal, which the core aborts when
      // the validity ends (a ttl under that interval cannot be renewed at all: the store's minimum ttl).
      await this.#io.paced(lease.key, signal)
      const record = this.#record(lease, hold, ttlMs, 'held')
      const answered: ServerClock = {}
      const out = await this.#io.write(lease.key, record, hold.version, signal, answered)
      if (out.kind === 'written') {
        // The core counts the renewed validity from before this call, which is before the write was sent.
        Object.assign(hold, { version: out.version, leaseMs: ttlMs, nonces: new Set([record.nonce]) })
        const until = hold.resumableUntil
        hold.resumableUntil = undefined
        if (until !== undefined && !answeredBefore(answered.seconds, until)) {
          throw leaseEnded(this.#io, lease.key, "the store's answer came after the lease's end")
        }
        return { renewed: true }
      }
      // A resume's write refused for a renewal of the original holder (our owner and fence, a nonce of
      // none of our writes): the same lease, live, continued from that version.
      if (hold.resumableUntil !== undefined && out.kind === 'other') {
        const renewed = out.record
        const until = renewed && resumableUntil(renewed)
        const original =
          heldBy(renewed, lease.owner) && renewed!.fence === lease.fence && !hold.nonces.has(renewed!.nonce)
        if (original && until !== undefined) {
          Object.assign(hold, { version: out.current!.version, resumableUntil: until })
          hold.nonces.add(renewed!.nonce)
          continue
        }
      }
      this.#lostOrThrow(out, lease, hold, 'renew')
      return { renewed: false }
    }
    throw unsettled(this.#io, lease.key, 'resume')
  }

  /**
   * `ElectionFacet.proclaim` (election.ts): a renewal's write with the new value, on our last version,
   * the lease as last written. Owner, fence and nonce are checked on a refusal as a renewal's are; false
   * when the record is no longer this hold's. Like any write it restarts the waiters' observation.
   */
  async proclaim(lease: HeldLease, value: string, signal: AbortSignal): Promise<ProclaimResult> {
    const hold = lease.cookie as CasHold
    // The store's write rate is per object: a proclaim and the renewals share it (GCS: one a second).
    await this.#io.paced(lease.key, signal)
    const record = { ...this.#record(lease, hold, hold.leaseMs, 'held'), value }
    const out = await this.#io.write(lease.key, record, hold.version, signal)
    if (out.kind === 'written') {
      Object.assign(hold, { version: out.version, value, nonces: new Set([record.nonce]) })
      return { proclaimed: true, cookie: hold }
    }
    this.#lostOrThrow(out, lease, hold, 'proclaim a value for')
    return { proclaimed: false }
  }

  /**
   * A write of the hold that did not land: returns when the record is no longer this hold's (lost);
   * throws when the write's outcome is unknown.
   */
  #lostOrThrow(
    out: Exclude<WriteOutcome, { kind: 'written' }>,
    lease: HeldLease,
    hold: CasHold,
    what: string,
  ): void {
    if (out.kind === 'unknown') throw out.error
    const ours = stillOurs(out.record, lease, hold)
    if (!ours) return
    // Still ours at another version: an earlier write of the hold whose outcome we did not know landed
    // late. We count on nothing new (this write stays unknown) but the next one, soon, replaces that version.
    // The value too: a proclaim of unknown outcome that landed is what the store shows, and what the
    // next renewal must keep.
    Object.assign(hold, { version: out.current!.version, leaseMs: ours.leaseMs, value: ours.value })
    throw unsettled(this.#io, lease.key, what)
  }

  /**
   * `LockBackend.release`: marks our record released (fence kept), free at once for the next writer,
   * and leaves its delete to the retirer (retire.ts), which sends it once nobody here took it again
   * for a while. False when it was no longer ours.
   */
  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    const hold = lease.cookie as CasHold
    for (let i = 0; i < TRIES; i++) {
      await this.#io.paced(lease.key, signal)
      const out = await this.#io.write(
        lease.key,
        this.#record(lease, hold, hold.leaseMs, 'released'),
        hold.version,
        signal,
      )
      if (out.kind === 'written') {
        this.#retirer.schedule(lease.key, out.version)
        return true
      }
      if (out.kind === 'unknown') throw out.error
      // Not this hold's any more (taken over after our lease, or written over by another attempt of the
      // same acquire): nothing to release.
      if (!stillOurs(out.record, lease, hold)) return false
      // Ours at a version a late renewal of ours left: release that one.
      hold.version = out.current!.version
    }
    throw unsettled(this.#io, lease.key, 'release')
  }

  /**
   * `LockBackend.abandon`: our acquire gave up, but a write of it may have landed (a lost reply, an abort
   * racing it), or may still land: the core stops waiting for an attempt at once (the SDK call rejects on
   * abort), while a request that had reached the server is committed after anything we do next.
   * - A record held by its owner: marked released, conditionally on its version.
   * - No record at all while a create of ours may still be in flight: a released record (with one less
   *   than a new record's fence, so the next grant still gets at least that) is created, which makes that
   *   create fail for good instead of leaving a lock nobody renews.
   * - A record at a version one of our replaces was conditioned on (a released record taken, a takeover
   *   after observed expiry): that replace has not landed and still could, granting a lock nobody renews
   *   (waiters would sit out a whole lease). It is written over with a released record on that version
   *   (same fence, a fresh nonce), so that our replace's condition fails for good. That changes no live
   *   holder's lease: the engine conditions a write on version V only after deciding that the record at V
   *   was free to take (released, or seen unchanged for its lease plus the margin), so "released" at V is
   *   what V already meant to every waiter, and the fence, kept, still moves on with the next grant.
   * - Any other version: none of our writes can land on it any more (versions never come back), nothing
   *   to do. An owner that never sent a write costs no request.
   * What it wrote (a placeholder of ours, marked released, among others) is retired like a release's.
   */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    const conditioned = this.#writers.get(req.owner)
    if (conditioned === undefined) return
    const clock: ServerClock = {}
    let current = await this.#io.read(req.key, signal, clock)
    for (let i = 0; i < TRIES; i++) {
      const found = current === undefined ? undefined : decodeRecord(current.body)
      const pending = found !== undefined && conditioned.has(current!.version)
      if (current !== undefined && !heldBy(found, req.owner) && !pending) {
        this.#writers.delete(req.owner)
        return
      }
      await this.#io.paced(req.key, signal)
      const record = released(req, found, this.#io.adapter.id, clock.seconds)
      const out = await this.#io.write(req.key, record, current?.version, signal)
      if (out.kind === 'unknown') throw out.error
      if (out.kind === 'written') {
        this.#writers.delete(req.owner)
        this.#retirer.schedule(req.key, out.version)
        return
      }
      current = out.current
    }
    throw unsettled(this.#io, req.key, 'clean up')
  }

  /** Our record with a fresh nonce, counted among the hold's writes before it is sent. */
  #record(lease: HeldLease, hold: CasHold, leaseMs: number, state: CasState): CasRecord {
    const nonce = newNonce()
    hold.nonces.add(nonce)
    return {
      owner: lease.owner,
      fence: lease.fence,
      leaseMs,
      state,
      holder: hold.holder,
      nonce,
      ...(hold.value === undefined ? {} : { value: hold.value }),
    }
  }
}

/**
 * The released record abandon writes over `found` (undefined: no record). The fence and lease are kept,
 * and the owner and holder too: a released record's owner never matters for exclusion (only a held one
 * is anyone's), and the fence it carries was theirs, not ours (`found` held by our owner is ours anyway).
 * No record: ours, with one less than a new record's fence (fence.ts), which nobody held, so the
 * next grant takes at least that fence; `seconds` is the server's clock of the read that found none. It
 * is a create, so marked fresh like any (it may land late): the next grant lifts its fence first.
 */
function released(
  req: AcquireRequest,
  found: CasRecord | undefined,
  backend: string,
  seconds: number | undefined,
): CasRecord {
  if (found !== undefined) return { ...found, state: 'released', nonce: newNonce() }
  return {
    owner: req.owner,
    fence: newRecordFence(seconds, req.key, backend) - 1n,
    leaseMs: req.ttlMs,
    state: 'released',
    holder: req.holder,
    nonce: newNonce(),
    ...(seconds === undefined ? {} : { fresh: true as const }),
  }
}

/** `record` when it is held by `lease.owner` with `lease.fence`, written by one of `hold`'s writes. */
function stillOurs(record: CasRecord | undefined, lease: HeldLease, hold: CasHold): CasRecord | undefined {
  if (!heldBy(record, lease.owner) || record!.fence !== lease.fence) return undefined
  return hold.nonces.has(record!.nonce) ? record : undefined
}

/** A write whose outcome stayed unclear because the record kept moving under our own late writes. */
function unsettled(io: CasIo, key: string, what: string): BackendUnavailableError {
  return new BackendUnavailableError(
    `Could not ${what} lock ${quoteKey(key)} on ${io.adapter.id}: an earlier write of ours landed late; retrying`,
    { key, backend: io.adapter.id, retryable: true },
  )
}
