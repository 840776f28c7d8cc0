/**
 * The Lua scripts of a Redis read-write lock, one per operation, each one atomic step on the server (also on
 * a Cluster: every key of one lock shares a hash tag, layout.ts). Every writing script reads the server's
 * clock (TIME) and first drops the entries whose lease ended or whose place lapsed by it: expiry is the
 * server's, never a client's. Every one ends with `finish`, which names the waiters that may now be granted
 * (when the line changed) and deletes the lock's keys once nobody holds or waits (its fence key stays), or
 * lets them expire with its last lease or place, so a lock whose clients all died leaves nothing behind.
 *
 * The line: the entries in arrival order (each arrival above the last one in line, so a clock stepped back
 * puts nobody ahead of earlier entries). A reader is granted when no writer is ahead of it (held or
 * waiting), a writer when it is first; so granted readers and a granted writer are never in line together.
 * Fences: a writer's is minted by the mutex's MINT (the server's clock in µs, or the last + 1); a reader's
 * is the read epoch: the epoch key while it equals the last fence minted (no writer granted since), else a
 * new fence minted for it. A downgrade mints nothing, so the next reader starts an epoch above the writer's.
 *
 * KEYS (every script): line, fence, writers, ends, grants, epoch (layout.ts `scriptKeys`).
 * ARGV[1] of every writing script: the `changed` channel.
 * The `for` loops walk lists already read inside one atomic script: no waiting.
 */

import { CHUNKED, oursOrZero, readBackScript } from '../lease-line/scripts.js'
import { CLOCK, script } from '../lua.js'
import { MINT } from '../mutex/scripts.js'

/**
 * What every writing script shares: `purge(now)`, `remove(owner)`, `fenceOf(grant)`, `finish(now)` (which
 * wakes the front of the line when `changed` was set, then keeps or deletes the keys).
 */
const COMMON = `${CLOCK}
local changed = false
${CHUNKED}local function purge(now)
  local ended = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  if #ended == 0 then return end
  changed = true
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  chunked('ZREM', KEYS[1], ended)
  chunked('ZREM', KEYS[3], ended)
  chunked('HDEL', KEYS[5], ended)
end
local function remove(owner)
  local removed = redis.call('ZREM', KEYS[1], owner)
  redis.call('ZREM', KEYS[3], owner)
  redis.call('ZREM', KEYS[4], owner)
  redis.call('HDEL', KEYS[5], owner)
  if removed > 0 then changed = true end
  return removed
end
local function fenceOf(grant)
  return string.match(grant, '^(%d+)')
end
-- Names each waiter that may now be granted, and nobody else: the first entry when it is a writer, else
-- every reader ahead of the first writer.
local function wakeFront()
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  if not head then return end
  local writer = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  local front
  if writer[1] == head then
    front = {head}
  elseif writer[1] then
    front = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. writer[2])
  else
    front = redis.call('ZRANGE', KEYS[1], 0, -1)
  end
  for _, owner in ipairs(front) do
    if redis.call('HEXISTS', KEYS[5], owner) == 0 then redis.call('PUBLISH', ARGV[1], owner) end
  end
end
local function finish(now)
  if changed then wakeFront() end
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2]
  if not last or tonumber(last) <= now then
    redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
    return
  end
  for _, i in ipairs({1, 3, 4, 5, 6}) do redis.call('PEXPIRE', KEYS[i], tonumber(last) - now) end
end
`

/** How extend, release and downgrade begin: 0 unless ARGV[2] (the owner) holds the grant of ARGV[3] (its fence). */
const OURS_OR_ZERO = oursOrZero({
  grants: 'KEYS[5]',
  owner: 'ARGV[2]',
  token: 'ARGV[3]',
  tokenOf: 'fenceOf',
  finish: 'finish',
})

/**
 * One attempt. ARGV: channel, owner, ttl ms, mode ('read' or 'write'), description, ms a place in line is
 * kept. Returns {1, fence} when granted (also when this owner holds a lease already: an earlier attempt of
 * the same acquire ran but its reply was lost; its lease is renewed for ttl), else {0, ms until the soonest
 * other lease or place ends, or 0}, with this owner's place in line kept (or taken).
 */
export const ACQUIRE = script(`${COMMON}${MINT}
local now = clock()
purge(now)
local owner, ttl, writing = ARGV[2], tonumber(ARGV[3]), ARGV[4] == 'write'
local grant = redis.call('HGET', KEYS[5], owner)
if grant then
  redis.call('ZADD', KEYS[4], now + ttl, owner)
  finish(now)
  return {1, fenceOf(grant)}
end
local arrival = redis.call('ZSCORE', KEYS[1], owner)
if not arrival then
  local t = redis.call('TIME')
  local at = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
  if last and tonumber(last) >= at then at = tonumber(last) + 1 end
  arrival = string.format('%.0f', at)
  redis.call('ZADD', KEYS[1], arrival, owner)
  if writing then redis.call('ZADD', KEYS[3], arrival, owner) end
end
local admitted
if writing then
  admitted = redis.call('ZRANGE', KEYS[1], 0, 0)[1] == owner
else
  local writer = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
  admitted = not writer or tonumber(writer) > tonumber(arrival)
end
if admitted then
  local fence
  local epoch = redis.call('GET', KEYS[6])
  if not writing and epoch and epoch == redis.call('GET', KEYS[2]) then
    fence = epoch
    if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
  else
    fence = string.format('%.0f', mint(ttl))
    if not writing then redis.call('SET', KEYS[6], fence) end
  end
  redis.call('HSET', KEYS[5], owner, fence .. ' ' .. ARGV[5])
  redis.call('ZADD', KEYS[4], now + ttl, owner)
  finish(now)
  return {1, fence}
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[6]), owner)
local soonest = 0
local soon = redis.call('ZRANGE', KEYS[4], 0, 1, 'WITHSCORES')
if soon[1] and soon[1] ~= owner then soonest = tonumber(soon[2]) - now
elseif soon[3] then soonest = tonumber(soon[4]) - now end
finish(now)
return {0, soonest}
`)

/**
 * Extend. ARGV: channel, owner, fence, ttl ms. Only the lease of `owner` granted with `fence`
 * (OURS_OR_ZERO), only while it is valid; the fence key is kept at least as long. 1, or 0 when not ours.
 */
export const EXTEND = script(`${COMMON}${OURS_OR_ZERO}
local ttl = tonumber(ARGV[4])
redis.call('ZADD', KEYS[4], now + ttl, ARGV[2])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
finish(now)
return 1
`)

/** Release. ARGV: channel, owner, fence. Removes the entry only if it is `owner`'s with `fence`. 1, or 0. */
export const RELEASE = script(`${COMMON}${OURS_OR_ZERO}
remove(ARGV[2])
finish(now)
return 1
`)

/**
 * Abandon: an acquire given up. ARGV: channel, owner. Removes its entry, granted or waiting
 * (owner-checked: only this acquire's). How many entries it removed (0 or 1).
 */
export const ABANDON = script(`${COMMON}
local now = clock()
purge(now)
local removed = remove(ARGV[2])
finish(now)
return removed
`)

/**
 * Downgrade. ARGV: channel, owner, fence. Only the lease of `owner` granted with `fence`: its entry leaves
 * the writers and stays where it is in line, with its fence (readers behind it may now be granted; a writer
 * behind it still has an entry ahead). 1 (also when it was a reader already: a downgrade whose reply was
 * lost), or 0 when not ours.
 */
export const DOWNGRADE = script(`${COMMON}${OURS_OR_ZERO}
if redis.call('ZREM', KEYS[3], ARGV[2]) > 0 then changed = true end
finish(now)
return 1
`)

/**
 * Holders, read without writing. Returns false when the store keeps nothing of the lock, else {the last
 * fence or '', places in line, then per valid lease: owner, 1 for a writer or 0, ms left, its grant
 * "<fence> <description>"}.
 */
export const HOLDERS = script(`${CLOCK}
local now = clock()
local latest = redis.call('GET', KEYS[2])
if not latest and redis.call('EXISTS', KEYS[1]) == 0 then return false end
local out = {latest or '', 0}
local granted = 0
local grants = redis.call('HGETALL', KEYS[5])
for i = 1, #grants, 2 do
  local ends = tonumber(redis.call('ZSCORE', KEYS[4], grants[i]))
  if ends and ends > now then
    granted = granted + 1
    out[#out + 1] = grants[i]
    out[#out + 1] = redis.call('ZSCORE', KEYS[3], grants[i]) and 1 or 0
    out[#out + 1] = ends - now
    out[#out + 1] = grants[i + 1]
  end
end
out[2] = redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf') - granted
return out
`)

/** Inspect, read without writing: {the last fence or false, the number of valid leases}. */
export const INSPECT = script(`${CLOCK}
local now, valid = clock(), 0
for _, owner in ipairs(redis.call('HKEYS', KEYS[5])) do
  local ends = tonumber(redis.call('ZSCORE', KEYS[4], owner))
  if ends and ends > now then valid = valid + 1 end
end
return {redis.call('GET', KEYS[2]), valid}
`)

/** Read back one owner's lease after an attempt whose reply was lost (../lease-line/scripts.ts). */
export const READ_BACK = readBackScript('KEYS[4]', 'KEYS[5]', '^(%d+)')
