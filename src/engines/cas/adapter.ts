/**
 * The adapter interface of the `cas-lease` engine: what a store with conditional writes (S3 `If-None-Match`
 * / `If-Match`, GCS `ifGenerationMatch`, DynamoDB condition expressions) gives the engine for one lock
 * record. The engine owns the record (its text, the fence in it, the per-write nonce), the observed-expiry
 * rule, waiting and every retry; an adapter only reads and writes one record per lock, conditionally.
 *
 * An adapter never retries a conditional write by itself in a way that hides its outcome: an SDK's own retry
 * may make "condition failed" mean "my own earlier attempt won", and the engine resolves that by reading
 * the record back and comparing the owner and the nonce, never by trusting the error.
 */
import type { BackendLimits, DoctorFinding } from '../../core/backend.js'
import type { ServerClock } from './fence.js'

/** A lock record as stored: the engine's text, and the store's version of it (ETag, generation, version attribute). */
export interface CasVersioned {
  /** What the engine wrote (UTF-8 text). */
  readonly body: string
  /** Opaque; changes with every write, also one that writes the same body (ETags of equal bodies are equal: the engine's nonce prevents that). */
  readonly version: string
}

/** The outcome of a conditional write. */
export type CasWrite =
  /** Written; `version` is the record's new version. */
  | { readonly ok: true; readonly version: string }
  /**
   * The condition failed: the record exists (create) or has another version (replace). `current` is the
   * record as it is now when the store returns it with the refusal (DynamoDB's
   * `ReturnValuesOnConditionCheckFailure: ALL_OLD`), saving the engine a read; otherwise the engine reads.
   */
  | { readonly ok: false; readonly current?: CasVersioned | undefined }

/** A record `CasAdapter.list` found: the lock key it belongs to, and the record as stored. */
export interface CasListed {
  readonly key: string
  readonly current: CasVersioned
}

/** One write of a transaction (`CasAdapter.transact`): a create when `version` is undefined, else a replace on it. */
export interface CasTransactWrite {
  readonly key: string
  readonly body: string
  readonly version: string | undefined
}

/** The outcome of a transaction: every write landed, or none did and none ever will. */
export type CasTransact =
  /** Every write landed; `versions` are the records' new versions, in the order of the writes. */
  | { readonly ok: true; readonly versions: readonly string[] }
  /**
   * Refused as a whole, nothing written. `failed` names the writes whose condition failed, each with its
   * record as it is now when the store returns it (undefined: no record, or none returned); `conflict`
   * says the store refused for another transaction on one of the records at the same moment (no
   * condition failed: trying again soon may succeed).
   */
  | {
      readonly ok: false
      readonly conflict: boolean
      readonly failed: readonly { readonly index: number; readonly current: CasVersioned | undefined }[]
    }

export interface CasAdapter {
  /** Names the store in errors and diagnostics (`s3://bucket/prefix`); never contains secrets. */
  readonly id: string
  /** Key and lease limits of the store (object name length, item size). */
  readonly limits: BackendLimits
  /**
   * The least time between two writes of one record that the store sustains (GCS: about one write per
   * second per object); 0 when it has no such limit. Heartbeats and takeovers never write faster.
   */
  readonly minWriteIntervalMs: number
  /**
   * The record of lock `key`, strongly consistent; `undefined` when there is none. Notes in `clock`, when
   * given, the server's clock its answer showed (the HTTP `Date`), also with a 404: the fence of a new
   * record is made from it (fence.ts). A store that shows none leaves it unset.
   */
  read(key: string, signal: AbortSignal, clock?: ServerClock): Promise<CasVersioned | undefined>
  /** Writes the record of `key` only if there is none; notes the answer's server clock as `read` does. */
  create(key: string, body: string, signal: AbortSignal, clock?: ServerClock): Promise<CasWrite>
  /** Replaces the record of `key` only if its version is still `version`; notes the clock as `read` does. */
  replace(
    key: string,
    body: string,
    version: string,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasWrite>
  /**
   * The writes of `writes` (one per key, no key twice) in ONE transaction of the store, all or none
   * (DynamoDB's TransactWriteItems), each conditioned as `create` or `replace` would condition it; notes
   * the clock as `read` does. Absent where the store has no conditional write of several records at once
   * (S3, GCS): the engine then refuses atomic sets.
   */
  transact?(
    writes: readonly CasTransactWrite[],
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasTransact>
  /** The most writes one `transact` takes (DynamoDB: 100); present with `transact`. */
  readonly transactLimit?: number | undefined
  /**
   * Deletes the record of `key` only if its version is still `version` (S3 `If-Match: <ETag>`, GCS
   * `ifGenerationMatch`, a DynamoDB condition on the version attribute), never unconditionally: true when
   * the store says it is gone (deleted now, or already absent), false when the condition failed (another
   * version is there: someone wrote since, and the record stays). Notes the clock as `read` does. An adapter
   * without it keeps every record (the engine then never retires one).
   */
  delete?(key: string, version: string, signal: AbortSignal, clock?: ServerClock): Promise<boolean>
  /**
   * The records of lock keys that may start with `prefix` (a store that can only filter after reading
   * returns more; the engine filters), read-only, a page of the store at a time: never the whole store in
   * one reply. Each with its lock key: from the store's name for the record where it says it, else from
   * the record itself (which names its key: `keyOfObject`, objects.ts); one no key can be told for is
   * left out.
   */
  list?(prefix: string, signal: AbortSignal): AsyncIterable<CasListed>
  /**
   * Proves the store enforces what the engine relies on (two creates: the second must be refused; a replace
   * with a stale version must be refused), on a probe record of its own; an `error` finding names the
   * server when it does not.
   */
  doctor?(signal: AbortSignal): Promise<DoctorFinding[]>
  /** Closes only what the adapter itself opened (a client made from a URL, never the user's). */
  close(): Promise<void>
}
// Errors: a refused condition is `{ ok: false }`, never an exception. Anything else (network, 5xx, 429,
// credentials) throws `BackendUnavailableError` naming the key and the store, `retryable` for 429/5xx and
// network errors; the outcome of a write that threw is unknown (it may have been applied).
