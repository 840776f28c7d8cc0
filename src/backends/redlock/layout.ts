/**
 * Where Redlock keeps its own state on each node, besides the Redis backend's lock keys (redis/layout.ts):
 * the admission marker. The backend and the tests both use this; nobody copies the format.
 */
import { DEFAULT_PREFIX } from '../redis/layout.js'

/** The node's admission marker under `prefix`: the run_id of the server process that was admitted. */
export const admissionMarker = (prefix: string = DEFAULT_PREFIX): string => `${prefix}!admitted`
