/**
 * The scripts only Redlock runs (the lock scripts themselves are the Redis backend's, unchanged). Both read
 * the server's run_id with `INFO server` inside the script, so the run_id and what the script reads or
 * writes belong to one and the same server process: no restart can fall between them.
 *
 * KEYS[1] is the node's admission marker `<prefix>!admitted` (see admission.ts): the run_id of the server
 * process that was admitted, that is, whose fence counters were caught up (or found fresh) before it voted.
 */
import { createHash } from 'node:crypto'
import type { Script } from '../redis/scripts.js'

const script = (source: string): Script => ({ source, sha: createHash('sha1').update(source).digest('hex') })

/** The run_id of the server process running the script. */
const RUN_ID = `string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')`

/**
 * The node's state: {run_id, marker or false}, in one atomic step. The node is admitted iff the two are
 * equal: a server restarted empty has no marker, one restarted from its files has an older run_id in it.
 */
export const STATE = script(`
return {${RUN_ID}, redis.call('GET', KEYS[1])}
`)

/**
 * Admit. ARGV[1]: the run_id whose counters were caught up. Writes the marker only if the script runs on
 * that very process (returns 1), else returns 0: a marker written on a server that restarted after its
 * catch-up would otherwise admit a process that has forgotten the counters. (A stale run_id in a marker
 * admits nothing, which is what makes a late or repeated write harmless.)
 * `replicate_commands` lets Redis < 5 write after INFO, whose output differs between runs.
 */
export const ADMIT = script(`
if redis.replicate_commands then redis.replicate_commands() end
if ${RUN_ID} ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)
