/**
 * What an operator does to `cas-lease` records, beside the engine's attempts and holds: see them
 * (`inspect`'s view of one record, `list` of many) and break one.
 *
 * - The view of a held record cannot say whether its lease is still live: leases end by OBSERVED expiry
 *   (a waiter must see the same version for a whole lease on its own clock), and one read shows only a
 *   version. A held record is shown held, with `expiresInMs` the most its lease can have left: its
 *   length, less the time this process has already seen that very version unchanged (a process that
 *   never saw it before counts from its read). A holder that stopped renewing shows a full lease to a
 *   fresh reader; the note says so.
 * - list: the adapter's listing (adapter.ts), a page of the store at a time, filtered here by
 *   key prefix and state. Read-only, also for the engine: what it reads is not noted as observed (a
 *   listing of 50,000 records would push the waiters' own observations out of their bounded map).
 * - break: the very write a release makes (the record marked released, fence kept, a fresh nonce),
 *   conditioned on the version read, but without the owner check. The holder's next renewal is
 *   conditioned on its own last version and is refused: it finds the record released, not its own, and
 *   loses the lock. Waiters read the released record at their next poll, as after a release (the store
 *   cannot notify). A write that loses a race (a renewal in between) reads the record its refusal
 *   shows and decides again, in bounded rounds; from the second round on, only the grant read first is
 *   broken, never one granted since.
 */
import type { BreakOptions, BreakResult, ListedLock, LockInfo } from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { BackendUnavailableError, quoteKey } from '../../core/errors.js'
import { retryRounds } from '../../core/retry.js'
import type { CasVersioned } from './adapter.js'
import { type CasRecord, decodeRecord, newNonce } from './record.js'
import type { CasIo } from './write.js'

/** Rounds of a break whose write keeps losing to the holder's renewals (one every ttl/3 at most). */
const BREAK_ROUNDS = 10

const NOT_OURS = 'is not a fencelock record; it is left alone'

const HELD_NOTE =
  'held unless its holder stopped renewing: one read cannot tell (leases end by observed expiry). ' +
  'expiresInMs is the most the lease has left: its length less the time this process has seen the ' +
  'record unchanged; a waiter takes over only after seeing it unchanged for a whole lease plus a margin'

/** `inspect`'s view of a stored record (undefined: not ours) this process has seen unchanged for `unchangedMs`. */
export function recordView(record: CasRecord | undefined, unchangedMs: number, store: string): LockInfo {
  if (record === undefined) return { held: true, note: `the object of this lock on ${store} ${NOT_OURS}` }
  if (record.state === 'released') return { held: false, fence: record.fence }
  return {
    held: true,
    owner: record.owner,
    holder: record.holder,
    fence: record.fence,
    expiresInMs: Math.max(0, Math.floor(record.leaseMs - unchangedMs)),
    note: HELD_NOTE,
    ...(record.value === undefined ? {} : { value: record.value }),
  }
}

export class CasOperations {
  readonly #io: CasIo

  constructor(io: CasIo) {
    this.#io = io
  }

  /** `LockBackend.list`: the held records of keys starting with `prefix`, as the adapter pages them. */
  async *list(prefix: string, signal: AbortSignal): AsyncGenerator<ListedLock> {
    const { adapter, seen } = this.#io
    if (!adapter.list) return
    for await (const { key, current } of adapter.list(prefix, signal)) {
      // The adapter may return more than the prefix (hashed object names, a Scan's page): filtered here.
      if (!key.startsWith(prefix)) continue
      const record = decodeRecord(current.body)
      if (record?.state === 'released') continue
      const known = seen.get(key)
      const unchangedMs = known?.version === current.version ? now() - known.since : 0
      yield { key, ...recordView(record, unchangedMs, adapter.id) }
    }
  }

  /** `LockBackend.breakLock`: ends the lease it reads (with `fence`: only that grant's), keeping the fence. */
  breakLock(key: string, options: BreakOptions = {}): Promise<BreakResult> {
    const signal = options.signal ?? new AbortController().signal
    let aimed = options.fence
    // What the last round learnt of the record (a refused write shows it): read when unknown.
    let known: { readonly current: CasVersioned | undefined } | undefined
    const round = async (): Promise<BreakResult | undefined> => {
      const current = known ? known.current : await this.#io.read(key, signal)
      if (current === undefined) return { broken: false }
      const record = decodeRecord(current.body)
      if (record === undefined) throw this.#notOurs(key)
      if (record.state === 'released') return { broken: false }
      const lease = { owner: record.owner, fence: record.fence, holder: record.holder }
      if (aimed !== undefined && record.fence !== aimed) return { broken: false, lease }
      aimed = record.fence
      await this.#io.paced(key, signal)
      const released: CasRecord = { ...record, state: 'released', nonce: newNonce() }
      const out = await this.#io.write(key, released, current.version, signal)
      if (out.kind === 'written') return { broken: true, lease }
      if (out.kind === 'unknown') throw out.error
      known = { current: out.current }
      return undefined
    }
    return retryRounds(BREAK_ROUNDS, round, () => this.#unsettled(key))
  }

  #notOurs(key: string): BackendUnavailableError {
    const store = this.#io.adapter.id
    return new BackendUnavailableError(
      `Cannot break lock ${quoteKey(key)}: its object on ${store} ${NOT_OURS} (its fence is unknown, so ` +
        'fencelock never writes over it). If nothing else uses it, delete it: the next grant still gets a ' +
        'greater fence',
      { key, backend: store, retryable: false },
    )
  }

  #unsettled(key: string): BackendUnavailableError {
    const store = this.#io.adapter.id
    return new BackendUnavailableError(
      `Could not break lock ${quoteKey(key)} on ${store}: the record changed under each of ${BREAK_ROUNDS} ` +
        'conditional writes; try again',
      { key, backend: store, retryable: true },
    )
  }
}
