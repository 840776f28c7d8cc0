import * as diagnosticsChannel from 'node:diagnostics_channel'

/**
 * Observe fencelock without a logging dependency: subscribe with `diagnostics_channel.subscribe(name, fn)`.
 * Every message has `key` and `backend`; see each channel for the rest. Nothing is built when nobody listens.
 */
export const channels = {
  /**
   * `{ key, backend, owner, ttlMs, timeoutMs }` when `acquire`/`tryAcquire` begins. `owner` is the id the
   * lock will carry if granted: it pairs this message with the acquire's `ok` or `fail`.
   */
  acquireStart: diagnosticsChannel.channel('fencelock:acquire:start'),
  /**
   * `{ key, backend, owner, fence, attempts, waitedMs, attemptMs }` when a lock is granted. `waitedMs`: since
   * the acquire began; `attemptMs`: of that, the granting attempt's own round trip (about 0 for a grant
   * handed over while waiting), so `waitedMs - attemptMs` is the time spent waiting for other holders.
   */
  acquireOk: diagnosticsChannel.channel('fencelock:acquire:ok'),
  /**
   * `{ key, backend, owner, attempts, waitedMs, aborted, error }` when an acquire gives up; `aborted`: the
   * caller's signal aborted it, or its client was closed.
   */
  acquireFail: diagnosticsChannel.channel('fencelock:acquire:fail'),
  /**
   * `{ key, backend, owner, fence, outcome: 'renewed' | 'lost' | 'unknown', grantedMs?, error? }` after each
   * extend; `grantedMs` (renewed): the lease the store keeps from the extend's start, at most the ttl asked.
   */
  extend: diagnosticsChannel.channel('fencelock:extend'),
  /**
   * `{ key, backend, owner, fence, reason, error }` when a held lock is lost. `reason`: `'expired'` (its
   * validity passed without a confirmed renewal), `'not_owner'` (the store answered that it is no longer
   * ours), `'session_ended'` (the backend's session ended) or `'client_closed'` (its client was closed).
   */
  lost: diagnosticsChannel.channel('fencelock:lost'),
  /** `{ key, backend, owner, fence, released: boolean, error? }` after a release. */
  release: diagnosticsChannel.channel('fencelock:release'),
  /**
   * `{ key, backend, owner, operation: 'acquire' | 'extend' | 'release', error }` for every call the store failed
   * or did not answer in time, including the acquire attempts that are retried; `error` is the store's
   * own (a driver error, or a `TimeoutError`), not the `LockError` the caller may hear later.
   */
  storeError: diagnosticsChannel.channel('fencelock:store:error'),
} as const

/** Why a held lock was lost (`channels.lost`). */
export type LossReason = 'expired' | 'not_owner' | 'session_ended' | 'client_closed'

export function publish(channel: diagnosticsChannel.Channel, message: () => object): void {
  if (channel.hasSubscribers) channel.publish(message())
}
