/**
 * The Lua scripts of a Redis semaphore, one per operation, each one atomic step on the server (also on a
 * Cluster: every key of one semaphore shares a hash tag, layout.ts). Every script reads the server's clock
 * (TIME) and first drops the leases that ended and the places in line that lapsed by it: expiry is the
 * server's, never a client's. Every script that writes ends with `keep`, which deletes the semaphore once
 * nothing holds or waits (its sequence counter stays) and otherwise lets its keys expire with its last lease
 * or place, so a semaphore whose clients all died leaves nothing behind. Sequences are minted by the mutex's
 * MINT: the server's clock in µs as their floor, so they keep rising after the semaphore was forgotten.
 *
 * KEYS (every script): limit, sequence, leases, grants, line, kept (layout.ts `scriptKeys`).
 * The `for` loops walk lists already read inside one atomic script (chunks of arguments): no waiting.
 */

import { CHUNKED, oursOrZero, readBackScript } from '../lease-line/scripts.js'
import { CLOCK, script } from '../lua.js'
import { MINT } from '../mutex/scripts.js'

/**
 * What every script shares: `purge(now)`, `held()` (the permits of the leases left), `first()` (the owner
 * first in line), `wakeFirst(channel)` (names it on the `changed` channel, when there is one),
 * `sequenceOf(grant)` and `keep(now)`.
 */
const COMMON = `${CLOCK}
${CHUNKED}local function purge(now)
  local ended = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #ended > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
    chunked('HDEL', KEYS[4], ended)
  end
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)
  if #lapsed > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
    chunked('ZREM', KEYS[5], lapsed)
  end
end
local function held()
  local sum = 0
  for _, grant in ipairs(redis.call('HVALS', KEYS[4])) do
    sum = sum + tonumber(string.match(grant, '^(%d+)'))
  end
  return sum
end
local function first()
  return redis.call('ZRANGE', KEYS[5], 0, 0)[1]
end
local function wakeFirst(channel)
  local head = first()
  if head then redis.call('PUBLISH', channel, head) end
end
local function sequenceOf(grant)
  return string.match(grant, '^%d+ (%d+)')
end
local function keep(now)
  local last = 0
  local lease = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if lease[2] then last = tonumber(lease[2]) end
  local place = redis.call('ZRANGE', KEYS[6], -1, -1, 'WITHSCORES')
  if place[2] and tonumber(place[2]) > last then last = tonumber(place[2]) end
  if last <= now then
    redis.call('DEL', KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
    return
  end
  for _, i in ipairs({1, 3, 4, 5, 6}) do redis.call('PEXPIRE', KEYS[i], last - now) end
end
`

/** How extend and release begin: 0 unless ARGV[1] (the owner) holds the grant of ARGV[2] (its sequence). */
const OURS_OR_ZERO = oursOrZero({
  grants: 'KEYS[4]',
  owner: 'ARGV[1]',
  token: 'ARGV[2]',
  tokenOf: 'sequenceOf',
  finish: 'keep',
})

/**
 * One attempt. ARGV: owner, ttl ms, limit, permits, '1' when the limit was compared already (then the stored
 * one is followed), description, the `changed` channel, ms a place in line is kept. Returns:
 * - {1, sequence}: granted (also when this owner holds a lease already: an earlier attempt of the same
 *   acquire ran but its reply was lost; its lease is renewed for ttl);
 * - {0, ms until the soonest lease ends, or 0}: queued, this owner's place in line kept (or taken);
 * - {-1, stored limit}: another limit is stored.
 * Granted only when first in line (or the line is empty) and the permits fit under the stored limit beside
 * the valid leases: strictly in order, so a large request is never passed by smaller ones. A grant with
 * others still in line names the next on `changed`: its permits may fit too.
 */
export const ACQUIRE = script(`${COMMON}${MINT}
local now = clock()
purge(now)
local owner, ttl, limit, permits = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local stored = redis.call('GET', KEYS[1])
if stored then
  stored = tonumber(stored)
  if stored ~= limit and ARGV[5] ~= '1' then
    keep(now)
    return {-1, stored}
  end
  limit = stored
else
  redis.call('SET', KEYS[1], limit)
end
local mine = redis.call('HGET', KEYS[4], owner)
if mine then
  redis.call('ZADD', KEYS[3], now + ttl, owner)
  keep(now)
  return {1, sequenceOf(mine)}
end
local head = first()
if (head == nil or head == owner) and held() + permits <= limit then
  redis.call('ZREM', KEYS[5], owner)
  redis.call('ZREM', KEYS[6], owner)
  local sequence = string.format('%.0f', mint(ttl))
  redis.call('ZADD', KEYS[3], now + ttl, owner)
  redis.call('HSET', KEYS[4], owner, permits .. ' ' .. sequence .. ' ' .. ARGV[6])
  wakeFirst(ARGV[7])
  keep(now)
  return {1, sequence}
end
if not redis.call('ZSCORE', KEYS[5], owner) then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[5], string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2])), owner)
end
redis.call('ZADD', KEYS[6], now + tonumber(ARGV[8]), owner)
local soonest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
keep(now)
if soonest[2] then return {0, tonumber(soonest[2]) - now} end
return {0, 0}
`)

/**
 * Extend. ARGV: owner, sequence, ttl ms. Only the lease of `owner` granted with `sequence`
 * (`OURS_OR_ZERO`), only while it is valid. The sequence
 * counter is kept at least as long as the lease, so `inspect` keeps its latest. 1, or 0 when not ours.
 */
export const EXTEND = script(`${COMMON}${OURS_OR_ZERO}
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
keep(now)
return 1
`)

/**
 * Release. ARGV: owner, sequence, the `changed` channel. Deletes the lease only if it is `owner`'s with
 * `sequence`, and names the first in line on `changed` (the freed permits may admit it). 1, or 0.
 */
export const RELEASE = script(`${COMMON}${OURS_OR_ZERO}
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
wakeFirst(ARGV[3])
keep(now)
return 1
`)

/**
 * Abandon: an acquire given up. ARGV: owner, the `changed` channel. Removes whatever `owner` holds or where
 * it waits (owner-checked: only this acquire's), and names the first in line when that changed anything.
 */
export const ABANDON = script(`${COMMON}
local now = clock()
purge(now)
local removed = redis.call('ZREM', KEYS[3], ARGV[1]) + redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
if removed > 0 then wakeFirst(ARGV[2]) end
keep(now)
return removed
`)

/**
 * Set the limit. ARGV: limit, the `changed` channel. Stores it whatever it was, and names the first in line
 * (a raised limit may admit it). A semaphore nobody holds or waits for keeps the limit an hour.
 */
export const SET_LIMIT = script(`${COMMON}
local now = clock()
purge(now)
redis.call('SET', KEYS[1], ARGV[1])
wakeFirst(ARGV[2])
if redis.call('EXISTS', KEYS[3]) + redis.call('EXISTS', KEYS[5]) == 0 then
  redis.call('PEXPIRE', KEYS[1], 3600000)
else
  keep(now)
end
return 1
`)

/**
 * Holders, read without writing. Returns false when no limit is stored, else {limit, places in line,
 * then per valid lease: owner, ms left, its grant "<permits> <sequence> <description>"}.
 */
export const HOLDERS = script(`${CLOCK}
local now = clock()
local limit = redis.call('GET', KEYS[1])
if not limit then return false end
local out = {limit, redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf')}
local leases = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES')
for i = 1, #leases, 2 do
  out[#out + 1] = leases[i]
  out[#out + 1] = tonumber(leases[i + 1]) - now
  out[#out + 1] = redis.call('HGET', KEYS[4], leases[i]) or ''
end
return out
`)

/** Inspect, read without writing: {the last sequence or false, the number of valid leases}. */
export const INSPECT = script(`${CLOCK}
return {redis.call('GET', KEYS[2]), redis.call('ZCOUNT', KEYS[3], '(' .. clock(), '+inf')}
`)

/** Read back one owner's lease after an attempt whose reply was lost (../lease-line/scripts.ts). */
export const READ_BACK = readBackScript('KEYS[3]', 'KEYS[4]', '^%d+ (%d+)')
