/**
 * The Lua scripts of a Redis election (also on a Redis Cluster: every key of one election shares a hash
 * tag, layout.ts). Each runs atomically on the server, so a check and the write that depends on it are one
 * step. The term is minted by the mutex's MINT (the server's clock in µs as its floor, so a term never
 * goes back even after the election's keys are gone), and a leadership is extended by the mutex's EXTEND:
 * the same algorithms, imported rather than copied.
 *
 * Keys (KEYS order of every script): leader (owner id, PX lease), term (MINT's counter: KEYS[2]), value
 * ("<owner> <value>", expiring with the leader), holder ("<owner> <description>").
 */
import { script } from '../lua.js'
import { HELD_FENCE, MINT } from '../mutex/scripts.js'

/**
 * Campaign: one attempt to lead. KEYS: leader, term, value, holder. ARGV: owner, ttl ms, value, description,
 * the `changed` channel. Returns {1, term} when granted (also when the leadership is already ours: an
 * earlier attempt of the same campaign ran but its reply was lost; a fresh term if its key is gone:
 * HELD_FENCE) and {0, ms left of the leader's lease}
 * when another leads. The grant and its value are written together, so no observer reads a leader without
 * its value; the grant publishes on `changed` for observers.
 */
export const CAMPAIGN = script(`${MINT}${HELD_FENCE}
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('PEXPIRE', KEYS[4], ARGV[2])
  return {1, heldFence(ARGV[2])}
end
if owner then return {0, redis.call('PTTL', KEYS[1])} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[2])
if ARGV[4] ~= '' then redis.call('SET', KEYS[4], ARGV[1] .. ' ' .. ARGV[4], 'PX', ARGV[2]) end
local term = mint(ARGV[2])
redis.call('PUBLISH', ARGV[5], '+' .. ARGV[1])
return {1, term}
`)

/**
 * Proclaim: replaces the leader's value. KEYS: leader, term, value. ARGV: owner, term, value, the `changed`
 * channel. Only while `owner` leads with `term` (never a blind write: a campaign of the same owner granted
 * again later has another term); the value keeps the leader's remaining lease. 1, or 0 when not ours.
 */
export const PROCLAIM = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left <= 0 then return 0 end
redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[3], 'PX', left)
redis.call('PUBLISH', ARGV[4], '=' .. ARGV[1])
return 1
`)

/**
 * Resign (a release, and the clean-up of a campaign given up). KEYS: leader, value, holder. ARGV: owner,
 * the `released` channel, the `changed` channel. Deletes the leadership only if `owner` holds it, and
 * says so on both channels: "-<owner>" wakes one waiting candidate per client and every observer. The
 * term key stays, so the next leader's term is greater. 1, or 0 when not ours.
 */
export const RESIGN = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('PUBLISH', ARGV[2], '-' .. ARGV[1])
redis.call('PUBLISH', ARGV[3], '-' .. ARGV[1])
return 1
`)

/**
 * Inspect. KEYS: leader, term, value, holder. The leader (or false), its remaining ms, the term counter,
 * the value record and the holder record (or false), in one consistent read.
 */
export const INSPECT = script(`
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  redis.call('GET', KEYS[3]), redis.call('GET', KEYS[4])}
`)
