/**
 * Resuming a `cas-lease` lock from its token (`locks.resume`, src/core/resume.ts): the rule that tells a
 * live lease from one whose time has passed, on a store that keeps no expiry. A record stays "held" after
 * its holder stops renewing until a waiter, having seen its version unchanged for the lease plus a margin,
 * takes it over (observe.ts); a process that comes fresh to it cannot tell, by watching, a lease renewed a
 * moment ago from one that ended an hour ago with nobody waiting.
 *
 * The rule, on the STORE's clock only. Every write carries `notBeforeMs` (write.ts): the store's clock it
 * was sent after, at the least, so the write was applied no sooner. A waiter takes the record over no
 * sooner than its lease after it was applied (it starts watching after a read that showed it: observe.ts),
 * so no waiter can have taken it before `notBeforeMs + leaseMs`. A resume continues the lease only if its
 * own write is applied before that point, less `CLOCKS_SLACK_MS` for the store's front ends whose clocks
 * differ: an answer showing second S was served before S + 1 (its `Date` is truncated), and a write is
 * applied before its answer is served. So:
 *   - the read behind the resume must show a second S with (S + 1) s <= end, else the lease has ended (or
 *     may have): `LockLostError`, nothing written;
 *   - the resume's extend (hold.ts) must be answered at a second S' with (S' + 1) s <= end too, else it may
 *     have landed after a waiter could have taken the lease: `LockLostError`. The record it wrote is left
 *     as it is, held under a version nobody renews, ended by the waiters' observation like any lease whose
 *     holder is gone: marking it released could cut short the original holder, whose own end may be later
 *     than ours (`notBeforeMs` is a lower bound).
 * Safety does not rest on it alone: the extend is conditioned on the version read, and a takeover on the
 * version it watched, so at most one of them lands. The rule makes the OUTCOME honest: a resumed handle
 * only ever continues a lease that was live, never one revived after its time because nobody happened to
 * be waiting. What it costs: a lease within about two seconds of its end (one for the truncation of the
 * `Date`, one for the slack) is refused though it may be live, and a store that shows no clock (no `Date`
 * in its answers) cannot resume at all. Requests: 1 R (the core's inspect) + 1 R + 1 W.
 *
 * The token carries no cookie: the record (its version, nonce and lease) is read again here. The original
 * handle's next renewal, conditioned on the version the resume replaced, is refused (the nonce is not one
 * of its writes): it is declared lost, and the resumed handle goes on.
 */
import type { HeldLease, ResumeFacet } from '../../core/backend.js'
import { CapabilityError, LockLostError, quoteKey } from '../../core/errors.js'
import type { ServerClock } from './fence.js'
import type { CasHold } from './hold.js'
import { type CasRecord, decodeRecord, heldBy } from './record.js'
import type { CasIo } from './write.js'

/** What the clocks of the store's front ends may differ by, twice over (fence.ts allows one second too). */
export const CLOCKS_SLACK_MS = 1000

/** The latest moment (store's clock, ms since 1970) a resume may continue `record`'s lease; undefined: unknown. */
export function resumableUntil(record: CasRecord): number | undefined {
  if (record.notBeforeMs === undefined) return undefined
  return record.notBeforeMs + record.leaseMs - CLOCKS_SLACK_MS
}

/** Whether an answer showing server second `seconds` was surely served before `until`. */
export function answeredBefore(seconds: number | undefined, until: number): boolean {
  return seconds !== undefined && (seconds + 1) * 1000 <= until
}

/** The error of a resume whose lease has ended (or may have), by the store's clock. */
export function leaseEnded(io: CasIo, key: string, why: string): LockLostError {
  return new LockLostError(
    `Cannot resume lock ${quoteKey(key)} on ${io.adapter.id}: ${why}. The token's lease has ended; ` +
      'acquire the lock anew',
    { key, backend: io.adapter.id },
  )
}

/** The resume facet of the cas-lease engine over `io`; see the header. */
export function casResume(io: CasIo): ResumeFacet {
  return {
    encode: () => undefined,
    async decode(lease: HeldLease, signal: AbortSignal) {
      if (lease.cookie !== undefined) {
        throw new TypeError(
          "This lock token is damaged: it carries data this store's tokens never have. Copy it whole",
        )
      }
      const clock: ServerClock = {}
      const current = await io.read(lease.key, signal, clock)
      const record = current === undefined ? undefined : decodeRecord(current.body)
      if (current === undefined || !heldBy(record, lease.owner) || record!.fence !== lease.fence) return null
      const until = resumableUntil(record!)
      if (until === undefined || clock.seconds === undefined) {
        throw new CapabilityError(
          `Cannot resume lock ${quoteKey(lease.key)} on ${io.adapter.id}: the store shows no clock in its ` +
            'answers (an HTTP Date), so a resume cannot tell a live lease from one whose time has passed',
          { key: lease.key, backend: io.adapter.id },
        )
      }
      if (!answeredBefore(clock.seconds, until)) {
        throw leaseEnded(io, lease.key, "its lease has passed, or is about to, by the store's clock")
      }
      const hold: CasHold = {
        version: current.version,
        leaseMs: record!.leaseMs,
        holder: record!.holder,
        value: record!.value,
        nonces: new Set([record!.nonce]),
        resumableUntil: until,
      }
      return { cookie: hold }
    },
  }
}
