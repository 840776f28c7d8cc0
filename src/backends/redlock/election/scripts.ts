/**
 * The scripts of an election on one Redlock node: the lock's line scripts (../scripts.ts) with the
 * leader's value beside the hold, and a `changed` message for observers at every change of who leads or
 * of the value. The term is minted from the node's counter `<prefix>!fence` (NODE_MINT), the one every
 * lock name mints from and admission catches up after a restart: a term never goes back on a node
 * restarted empty. Extend and the read are the Redis scripts (mutex EXTEND; the Redis election's INSPECT).
 *
 * KEYS of every script, in order: 1 the leader `<prefix>!election{<tag>}` (an attempt's owner id, PX =
 * its lease), 2 the hold's term on this node `:term` (PX = the lease), 3 the holder record, 4 the line,
 * 5 the waiters' deadlines, 6 the node's counter, 7 the value "<owner> <value>" (PX = the lease).
 */
import { INSPECT as ELECTION_INSPECT } from '../../redis/election/scripts.js'
import { script } from '../../redis/lua.js'
import { FIRST, NODE_MINT, STAND } from '../scripts.js'

/**
 * Campaign, in line. ARGV: 1 the attempt's owner id, 2 ttl ms, 3 the holder's description, 4 the waiter,
 * 5 its ticket, 6 the waiter liveness ms (as LINE_ACQUIRE), 7 the value, 8 the `changed` channel.
 * {1, term} when granted (the election free and the waiter first in line, or the line empty; or already
 * this attempt's), else LINE_ACQUIRE's refusal. The value is written with the grant: no observer reads a
 * leader without its value.
 */
export const ELECTION_ACQUIRE = script(`${FIRST}${NODE_MINT}${STAND}
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('PEXPIRE', KEYS[7], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
local head = first()
if not owner and (not head or head == ARGV[4]) then
  local fence = mint()
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[2])
  if ARGV[3] ~= '' then redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[2]) end
  redis.call('SET', KEYS[7], ARGV[1] .. ' ' .. ARGV[7], 'PX', ARGV[2])
  redis.call('PUBLISH', ARGV[8], '+' .. ARGV[1])
  return {1, fence}
end
return stand(owner, head)
`)

/**
 * `over(changed)`: ends the hold of ARGV[1] if it is the leader here (true, and says so on `changed`),
 * else false. Shared by resign, clean-up and leave.
 */
const OVER = `
local function over(changed)
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[7])
  redis.call('PUBLISH', changed, '-' .. ARGV[1])
  return true
end
`

/**
 * Resign (LINE_RELEASE's). ARGV: 1 the attempt's owner id, 2 the wake prefix, 3 the waiter, 4 the
 * `changed` channel. 1 when it led here, else 0; the waiter leaves the line and the first one left wakes.
 */
export const ELECTION_RESIGN = script(`${FIRST}${OVER}
local ours = over(ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[3])
redis.call('ZREM', KEYS[5], ARGV[3])
if ours or redis.call('EXISTS', KEYS[1]) == 0 then
  local head = first()
  if head then wake(ARGV[2], head) end
end
if ours then return 1 end
return 0
`)

/** Clean-up of an attempt that lost its round (LINE_CLEAN_UP's); ARGV as ELECTION_RESIGN. */
export const ELECTION_CLEAN_UP = script(`${FIRST}${OVER}
if not over(ARGV[4]) then return 0 end
local head = first()
if head and head ~= ARGV[3] then wake(ARGV[2], head) end
return 1
`)

/** A campaign given up leaves the line (LINE_LEAVE's); ARGV as ELECTION_RESIGN. */
export const ELECTION_LEAVE = script(`${FIRST}${OVER}
local ours = over(ARGV[4])
local queued = redis.call('ZREM', KEYS[4], ARGV[3])
redis.call('ZREM', KEYS[5], ARGV[3])
if (ours or queued == 1) and redis.call('EXISTS', KEYS[1]) == 0 then
  local head = first()
  if head then wake(ARGV[2], head) end
end
return 1
`)

/**
 * Proclaim on this node. KEYS: 1 the leader, 2 the value. ARGV: 1 the attempt's owner id (one grant's
 * alone: every attempt has its own, so no later leadership of the same campaign can match), 2 the value,
 * 3 the `changed` channel. Replaces the value for the leader's remaining lease; 1, or 0 when not ours.
 */
export const ELECTION_PROCLAIM = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left <= 0 then return 0 end
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[2], 'PX', left)
redis.call('PUBLISH', ARGV[3], '=' .. ARGV[1])
return 1
`)

/** Every script of an election on a node, as each node's connection check loads them (../node.ts). */
export const ELECTION_SCRIPTS = [
  ELECTION_ACQUIRE,
  ELECTION_RESIGN,
  ELECTION_CLEAN_UP,
  ELECTION_LEAVE,
  ELECTION_PROCLAIM,
  ELECTION_INSPECT,
]
