/**
 * What a holder does to its own `cas-lease` record (extend, release), and what an acquire that gave up
 * does to whatever it may have left there (abandon). Every write is conditioned on the version our latest
 * known write left; a refusal is judged by the record as it is now (cas-write.ts), so that a renewal of
 * ours whose reply was lost, and which landed after all, is recognised as ours (owner and fence) and not
 * taken for a loss.
 */
import type { AcquireRequest, ExtendResult, HeldLease } from '../core/backend.js'
import type { BoundedMap } from '../core/bounded-map.js'
import { now, sleep } from '../core/clock.js'
import { BackendUnavailableError, quoteKey } from '../core/errors.js'
import { type CasRecord, type CasState, decodeRecord, heldBy, newNonce } from './cas-record.js'
import type { CasIo } from './cas-write.js'

/** The cookie of a cas-lease grant: what we know of our record. Updated in place by extend and release. */
export interface CasHold {
  /** The record's version as our latest write that we know of left it. */
  version: string
  /**
   * When the write that gave the lease we count on was sent (monotonic ms): the store keeps the lease
   * from no earlier, since every waiter starts watching that version only after it was written.
   */
  sentAt: number
  /** That write's lease. */
  leaseMs: number
  readonly holder: string | undefined
}

/** Writes one release or abandon makes at most, when the record keeps moving under our own late writes. */
const TRIES = 3

export class CasHolds {
  readonly #io: CasIo
  /** Owners whose acquire sent a write (cas-lease.ts): only they can have left a record to abandon. */
  readonly #writers: BoundedMap<string, true>

  constructor(io: CasIo, writers: BoundedMap<string, true>) {
    this.#io = io
    this.#writers = writers
  }

  /** `LockBackend.extend`: a replace of our record on our last version (new nonce, same fence). */
  async extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult> {
    const hold = lease.cookie as CasHold
    const start = now()
    // Too soon after our last write for the store's write rate: no write; the lease that write set is
    // what the store keeps, counted from when it was sent (the core never counts longer than `ttlMs`).
    if (start - hold.sentAt < this.#io.driver.minWriteIntervalMs) {
      return { renewed: true, ttlMs: hold.leaseMs - (start - hold.sentAt) }
    }
    const record = this.#record(lease, hold, ttlMs, 'held')
    const out = await this.#io.write(lease.key, record, hold.version, signal)
    if (out.kind === 'written') {
      // The core counts the renewed validity from before this call, which is before the write was sent.
      Object.assign(hold, { version: out.version, sentAt: start, leaseMs: ttlMs })
      return { renewed: true }
    }
    if (out.kind === 'unknown') throw out.error
    const ours = stillOurs(out.record, lease)
    if (!ours) return { renewed: false }
    // Still ours at another version: an earlier renewal whose outcome we did not know landed late. We
    // count on nothing new (this renewal stays unknown) but the next one, soon, replaces that version.
    // Its lease may be shorter than the one we count on: the shorter one counts from now on.
    Object.assign(hold, { version: out.current!.version, leaseMs: Math.min(hold.leaseMs, ours.leaseMs) })
    throw unsettled(this.#io, lease.key, 'renew')
  }

  /** `LockBackend.release`: marks our record released (fence kept); false when it was no longer ours. */
  async release(lease: HeldLease, signal: AbortSignal): Promise<boolean> {
    const hold = lease.cookie as CasHold
    for (let i = 0; i < TRIES; i++) {
      await this.#paced(lease.key, signal)
      const out = await this.#io.write(
        lease.key,
        this.#record(lease, hold, hold.leaseMs, 'released'),
        hold.version,
        signal,
      )
      if (out.kind === 'written') return true
      if (out.kind === 'unknown') throw out.error
      // Not ours any more (taken over after our lease, or never written): nothing to release.
      if (!stillOurs(out.record, lease)) return false
      // Ours at a version a late renewal of ours left: release that one.
      hold.version = out.current!.version
    }
    throw unsettled(this.#io, lease.key, 'release')
  }

  /**
   * `LockBackend.abandon`: our acquire gave up, but a write of it may have landed (a lost reply, an abort
   * racing it). A record held by its owner is marked released, conditionally on its version. No record
   * at all while a create of ours may still be in flight: a released record (fence 0, so the next grant
   * still gets 1) is created, which makes that create fail for good instead of leaving a lock nobody
   * renews. An owner that never sent a write costs no request.
   */
  async abandon(req: AcquireRequest, signal: AbortSignal): Promise<void> {
    if (!this.#writers.has(req.owner)) return
    let current = await this.#io.read(req.key, signal)
    for (let i = 0; i < TRIES; i++) {
      const found = current === undefined ? undefined : decodeRecord(current.body)
      if (current !== undefined && !heldBy(found, req.owner)) {
        this.#writers.delete(req.owner)
        return
      }
      await this.#paced(req.key, signal)
      const record: CasRecord = {
        owner: req.owner,
        fence: found?.fence ?? 0n,
        leaseMs: found?.leaseMs ?? req.ttlMs,
        state: 'released',
        holder: req.holder,
        nonce: newNonce(),
      }
      const out = await this.#io.write(req.key, record, current?.version, signal)
      if (out.kind === 'unknown') throw out.error
      if (out.kind === 'written') {
        this.#writers.delete(req.owner)
        return
      }
      current = out.current
    }
    throw unsettled(this.#io, req.key, 'clean up')
  }

  /** Our record with a fresh nonce. */
  #record(lease: HeldLease, hold: CasHold, leaseMs: number, state: CasState): CasRecord {
    return { owner: lease.owner, fence: lease.fence, leaseMs, state, holder: hold.holder, nonce: newNonce() }
  }

  /**
   * Waits until the store's write rate allows another write of `key` from this process (GCS: about one
   * per second per object). A release cannot be skipped like a renewal, nor refused like an attempt.
   */
  async #paced(key: string, signal: AbortSignal): Promise<void> {
    const wroteAt = this.#io.seen.lastWrite(key)
    if (wroteAt === undefined) return
    const allowedAt = wroteAt + this.#io.driver.minWriteIntervalMs
    // A loop: a timer may fire a little before the monotonic clock reaches its end.
    while (now() < allowedAt) {
      signal.throwIfAborted()
      await sleep(allowedAt - now(), signal)
    }
    signal.throwIfAborted()
  }
}

/** `record` when it is held by `lease.owner` with `lease.fence`: still this lock. */
export function stillOurs(record: CasRecord | undefined, lease: HeldLease): CasRecord | undefined {
  return heldBy(record, lease.owner) && record!.fence === lease.fence ? record : undefined
}

/** A write whose outcome stayed unclear because the record kept moving under our own late writes. */
function unsettled(io: CasIo, key: string, what: string): BackendUnavailableError {
  return new BackendUnavailableError(
    `Could not ${what} lock ${quoteKey(key)} on ${io.driver.id}: an earlier write of ours landed late; retrying`,
    { key, backend: io.driver.id, retryable: true },
  )
}
