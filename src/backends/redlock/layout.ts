/**
 * Where Redlock keeps its own state on each node, besides the Redis backend's lock keys (redis/layout.ts):
 * the node's fence counter, the admission marker, each lock's waiting line, and the channels its waiters
 * are woken on. The backend
 * and the tests both use this; nobody copies the format.
 */
import { DEFAULT_PREFIX, redisLockKeys } from '../redis/layout.js'

/**
 * The node's admission marker under `prefix`: the run_id of the server process that was admitted, or
 * IN_USE (a trace: the set was in use when a client first reached this process; admitted it is not).
 */
export const admissionMarker = (prefix: string = DEFAULT_PREFIX): string => `${prefix}!admitted`

/**
 * The node's fence counter under `prefix`, one for every lock name: each grant on the node mints the next
 * value, and a grant's token is written back into it (scripts.ts). It never expires: it is what lets a
 * name's own keys go with its last hold while every later grant, of any name, still mints more.
 */
export const nodeCounter = (prefix: string = DEFAULT_PREFIX): string => `${prefix}!fence`

/** A marker that names no process: written on a node that is not admitted yet, once the set is in use. */
export const IN_USE = 'in-use'

/**
 * The run_id of the node's server process if a bootstrap admitted it as part of a fresh set: that process
 * votes without the delayed restart (no lock was granted on the set before it; see admission.ts).
 */
export const freshMarker = (prefix: string = DEFAULT_PREFIX): string => `${prefix}!fresh`

/**
 * The waiting line of the lock named `key` on a node: `line` (waiter id -> ticket) and `alive` (waiter id
 * -> liveness deadline, ms of the server's clock), two sorted sets beside the lock key, in its hash tag.
 */
export function lineKeys(key: string, prefix: string = DEFAULT_PREFIX): { line: string; alive: string } {
  const { lock } = redisLockKeys(key, prefix)
  return { line: `${lock}:line`, alive: `${lock}:alive` }
}

/**
 * The channels that wake a client's waiters start with this: `<prefix>!wake:<client id>` is the channel of
 * one client (one backend), on which a node publishes the owner id of the client's waiter that is first in
 * a line now.
 */
export const wakePrefix = (prefix: string = DEFAULT_PREFIX): string => `${prefix}!wake:`
