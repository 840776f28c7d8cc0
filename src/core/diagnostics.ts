import * as diagnosticsChannel from 'node:diagnostics_channel'

/**
 * Observe fencelock without a logging dependency: subscribe with `diagnostics_channel.subscribe(name, fn)`.
 * Every message has `key` and `backend`; see each channel for the rest. Nothing is built when nobody listens.
 */
export const channels = {
  /** `{ key, backend, ttlMs, timeoutMs }` when `acquire`/`tryAcquire` begins. */
  acquireStart: diagnosticsChannel.channel('fencelock:acquire:start'),
  /** `{ key, backend, owner, fence, attempts, waitedMs }` when a lock is granted. */
  acquireOk: diagnosticsChannel.channel('fencelock:acquire:ok'),
  /** `{ key, backend, attempts, waitedMs, error }` when an acquire gives up. */
  acquireFail: diagnosticsChannel.channel('fencelock:acquire:fail'),
  /**
   * `{ key, backend, owner, fence, outcome: 'renewed' | 'lost' | 'unknown', grantedMs?, error? }` after each
   * extend; `grantedMs` (renewed): the lease the store keeps from the extend's start, at most the ttl asked.
   */
  extend: diagnosticsChannel.channel('fencelock:extend'),
  /** `{ key, backend, owner, fence, error }` when a held lock is lost. */
  lost: diagnosticsChannel.channel('fencelock:lost'),
  /** `{ key, backend, owner, fence, released: boolean, error? }` after a release. */
  release: diagnosticsChannel.channel('fencelock:release'),
} as const

export function publish(channel: diagnosticsChannel.Channel, message: () => object): void {
  if (channel.hasSubscribers) channel.publish(message())
}
