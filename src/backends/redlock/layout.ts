/**
 * Where Redlock keeps its own state on each node, besides the Redis backend's lock keys (redis/layout.ts):
 * the admission marker, and each lock's waiting line. The backend and the tests both use this; nobody
 * copies the format.
 */
import { DEFAULT_PREFIX, redisLockKeys } from '../redis/layout.js'

/** The node's admission marker under `prefix`: the run_id of the server process that was admitted. */
export const admissionMarker = (prefix: string = DEFAULT_PREFIX): string => `${prefix}!admitted`

/**
 * The waiting line of the lock named `key` on a node: `line` (waiter id -> ticket) and `alive` (waiter id
 * -> liveness deadline, ms of the server's clock), two sorted sets beside the lock key, in its hash tag.
 */
export function lineKeys(key: string, prefix: string = DEFAULT_PREFIX): { line: string; alive: string } {
  const { lock } = redisLockKeys(key, prefix)
  return { line: `${lock}:line`, alive: `${lock}:alive` }
}
