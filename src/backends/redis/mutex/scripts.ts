/**
 * The Lua scripts of the Redis mutex. Each runs atomically on the server: no other command interleaves,
 * so a check and the write that depends on it are one step. All keys of a lock share one hash tag, so
 * every script touches a single slot and runs unchanged on Redis Cluster.
 *
 * Keys: KEYS[1] `<prefix>{<key>}` holds the owner id, with the lease as its PX expiry. In plain mode its
 *       value is "<owner> <description>" (`AcquireRequest.holder`; the owner alone without one): the
 *       description rides in the one key a grant writes anyway, so a cycle writes and deletes no second
 *       key. Owner ids hold no space, so the owner is the value up to its first space (OWNS, HOLDER_OF).
 *       KEYS[2] `<prefix>{<key>}:fence` is the last fence minted (MINT), kept for an hour after it.
 *       `<prefix>{<key>}:holder` is "<owner> <description>" of a holder whose lock key holds its owner id
 *       alone (fair mode, Redlock's nodes, plain grants of earlier versions), for `inspect` only: written
 *       with the grant, with the same expiry. Nothing decides on it; the scripts accept its absence.
 * Fair mode adds KEYS[3] `…:queue` (a list of waiting owners, oldest first), KEYS[4] `…:waiters`
 * (a sorted set: each waiter's liveness deadline, in ms of the server's clock) and KEYS[5] `…:ttls`
 * (a hash: each waiter's requested ttl and description, "<ttl ms> <description>", for the hand-over).
 * The `while true` loops of the fair scripts are no waiting: inside one atomic script they walk the queue
 * past dead waiters and stop at the first live one (or its end).
 */
import { CLOCK, script } from '../lua.js'

/**
 * Records the lock's name, KEYS[k] = ARGV[a], where the key has a hashed tag (layout.ts `name`; the key is
 * absent otherwise): written by each grant and kept as long as the fence key, so `list` can name the lock.
 */
export const RECORD_NAME = (k: number, a: number, ttl: string) =>
  `if KEYS[${k}] then redis.call('SET', KEYS[${k}], ARGV[${a}], 'PX', math.max(3600000, tonumber(${ttl}))) end`

/**
 * `mint(ttl)`: the fence of a grant, KEYS[2] the last one (`mintAt(fenceKey, ttl)`: another key's): the server's clock in microseconds (TIME), or
 * the last fence + 1 when that is larger (grants within one microsecond, a clock stepped back a little).
 * Every fence is thus at most the clock when it was minted, or one more than a fence that was, and the
 * clock is read on every grant, never only when the key is gone, because the key can come back behind:
 * - a restart that loads an older snapshot (RDB, an AOF fsynced every second) or a failover to a replica
 *   that lags restores a live key below the fences granted since; counting on from it (INCR) would grant
 *   them again, while the clock is past them all;
 * - the key gone (deleted by an operator, evicted, expired an hour after the name's last grant, a restart
 *   that kept nothing): the clock alone is past every earlier fence;
 * - an earlier version's grants on the same name mint by this very rule on the same key.
 * What breaks it: the server's clock set back by more than an hour, or past the last fence while the key
 * is gone or behind; a failover to a replica whose clock is behind the primary's by more than the time
 * since the last grant. The key outlives the lease (max of an hour and the ttl), so storage is bounded by
 * the names used in the last hour. Formatted with %.0f: Lua prints numbers of 15+ digits in exponent form.
 * The election's and the semaphore's scripts mint with it too.
 */
export const MINT = `
local function mintAt(fenceKey, ttl)
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local stored = redis.call('GET', fenceKey)
  if stored then
    local last = tonumber(stored)
    -- Not a number: another program's key. INCRBY raises Redis's own "not an integer" error for it.
    if not last then redis.call('INCRBY', fenceKey, 0) end
    if last >= fence then fence = last + 1 end
  end
  redis.call('SET', fenceKey, string.format('%.0f', fence), 'PX', math.max(3600000, tonumber(ttl)))
  return fence
end
local function mint(ttl)
  return mintAt(KEYS[2], ttl)
end
`

/**
 * `heldFence(ttl)`: the fence of a lock found already ours (an earlier attempt of the same acquire ran, but
 * its reply was lost): the fence key's, or, when that key is gone (evicted, deleted), a fresh one from
 * MINT. The earlier fence was never heard, and answering none (or 0) would hand the holder a fence below
 * its predecessors'. Needs MINT; the election's campaign uses it too.
 */
export const HELD_FENCE = `
local function heldFence(ttl)
  return tonumber(redis.call('GET', KEYS[2])) or mint(ttl)
end
`

/**
 * `owns(value, owner)`: a lock key's value is `owner`'s, as the owner id alone or "<owner> <description>".
 * Owner ids hold no space, so no other owner's value starts with "<owner> ".
 */
export const OWNS = `
local function owns(value, owner)
  return value == owner or string.sub(value, 1, #owner + 1) == owner .. ' '
end
`

/**
 * `holderOf(value, holderKey)`: a held lock's owner id and holder record "<owner> <description>" (or
 * false): from the value itself when it carries the description (plain mode), else from the holder key.
 */
const HOLDER_OF = `
local function holderOf(value, holderKey)
  local space = string.find(value, ' ', 1, true)
  if space then return string.sub(value, 1, space - 1), value end
  return value, (holderKey and redis.call('GET', holderKey)) or false
end
`

/**
 * Acquire (plain mode). KEYS: lock, fence[, starving[, name]]. ARGV: owner, ttl ms[, description[, mark
 * ms[, key]]]. Writes the lock key "<owner> <description>" (OWNS). Returns {1, fence} when granted — also
 * when the key is already ours: an earlier attempt of the same acquire ran but its reply was lost — and
 * {0, ms worth waiting} when refused. Granting and minting the fence in one script is what makes the fence
 * belong to exactly this grant. A lock key written by an earlier version (the owner id alone) is held:
 * refused like any other.
 * The starvation bound: KEYS[3] `…:starving` names one waiter that has been refused for too long. While
 * it lives, a free lock goes to that waiter only (the others are told to wait out the mark), and its grant
 * deletes it. A waiter that counts as starving (ARGV[4] > 0) sets it when nobody else holds it, and
 * refreshes it (PX ARGV[4]) at each attempt: a marked waiter that dies or stops asking blocks a free lock
 * for no longer than that. A marked waiter is told to ask again within a third of it, so its mark lives.
 * The mark is read only when the lock is free or the caller is starving: a held lock costs nothing more.
 */
export const ACQUIRE = script(`${OWNS}${MINT}${HELD_FENCE}
local owner = redis.call('GET', KEYS[1])
if owner and owns(owner, ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, heldFence(ARGV[2])}
end
local markMs = tonumber(ARGV[4] or '0') or 0
local marked = false
if KEYS[3] and (not owner or markMs > 0) then marked = redis.call('GET', KEYS[3]) end
if not owner and (not marked or marked == ARGV[1]) then
  if marked then redis.call('DEL', KEYS[3]) end
  local value = ARGV[1]
  if ARGV[3] and ARGV[3] ~= '' then value = value .. ' ' .. ARGV[3] end
  redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  ${RECORD_NAME(4, 5, 'ARGV[2]')}
  return {1, mint(ARGV[2])}
end
if markMs > 0 and (not marked or marked == ARGV[1]) then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', markMs)
  local left = redis.call('PTTL', KEYS[1])
  if left < 0 then left = markMs end
  return {0, math.max(1, math.min(left, math.floor(markMs / 3)))}
end
if not owner then return {0, math.max(1, redis.call('PTTL', KEYS[3]))} end
return {0, redis.call('PTTL', KEYS[1])}
`)

/**
 * `announce(released)`, once a plain lock is free (RELEASE, BREAK, ABANDON): publishes ">" .. the marked
 * waiter while a starvation mark (KEYS[k]) lives, so that only it wakes (no other waiter could take the
 * lock), else "-<released owner>", which wakes the oldest waiter of each client. ARGV[c] is the channel.
 */
const ANNOUNCE = (k: number, c: number) => `
local function announce(released)
  local marked = KEYS[${k}] and redis.call('GET', KEYS[${k}])
  if marked then redis.call('PUBLISH', ARGV[${c}], '>' .. marked) else redis.call('PUBLISH', ARGV[${c}], '-' .. released) end
end
`

/**
 * Plain give-up (an acquire failed or timed out). KEYS: lock, starving. ARGV: owner, channel.
 * Releases the lock if an attempt of ours took it after all, and deletes our starvation mark (only ours):
 * a mark that outlived its waiter would keep a free lock from the others until it expires. Either way,
 * a lock left free is announced.
 */
export const ABANDON = script(`${OWNS}${ANNOUNCE(2, 2)}
local value = redis.call('GET', KEYS[1])
local held = value and owns(value, ARGV[1])
local marked = redis.call('GET', KEYS[2]) == ARGV[1]
if held then redis.call('DEL', KEYS[1]) end
if marked then redis.call('DEL', KEYS[2]) end
if held or (marked and redis.call('EXISTS', KEYS[1]) == 0) then announce(ARGV[1]) end
return held and 1 or 0
`)

/**
 * Fair acquire. ARGV: owner, ttl ms, waiter liveness ms. Waiters are served in arrival order: only the
 * head of the queue may take a free lock. Each attempt refreshes the caller's liveness deadline and
 * records its ttl (KEYS[5], a hash), so a release can hand the lock straight to it (RELEASE_FAIR). A waiter
 * that crashed or gave up silently stops refreshing and is dropped when it reaches the head, so nobody
 * waits behind it for longer than the liveness period. The server's clock (TIME) judges it.
 * KEYS[6] is the holder key; ARGV[4] the description (may be empty); KEYS[7] and ARGV[5] the name and key
 * (RECORD_NAME) for a key with a hashed tag.
 * Returns {1, fence} or {0, ms until it is worth trying again}.
 */
export const ACQUIRE_FAIR = script(`${CLOCK}${MINT}${HELD_FENCE}
while true do
  local head = redis.call('LINDEX', KEYS[3], 0)
  if not head then break end
  local alive = tonumber(redis.call('ZSCORE', KEYS[4], head))
  if alive and alive > clock() then break end
  redis.call('LPOP', KEYS[3])
  redis.call('ZREM', KEYS[4], head)
  redis.call('HDEL', KEYS[5], head)
end
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[6], ARGV[2])
  return {1, heldFence(ARGV[2])}
end
local head = redis.call('LINDEX', KEYS[3], 0)
if not owner and (not head or head == ARGV[1]) then
  if head then
    redis.call('LPOP', KEYS[3])
    redis.call('ZREM', KEYS[4], ARGV[1])
    redis.call('HDEL', KEYS[5], ARGV[1])
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if ARGV[4] ~= '' then redis.call('SET', KEYS[6], ARGV[1] .. ' ' .. ARGV[4], 'PX', ARGV[2]) end
  ${RECORD_NAME(7, 5, 'ARGV[2]')}
  return {1, mint(ARGV[2])}
end
if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then
  redis.call('RPUSH', KEYS[3], ARGV[1])
end
redis.call('ZADD', KEYS[4], clock() + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[2] .. ' ' .. ARGV[4])
if owner then return {0, redis.call('PTTL', KEYS[1])} end
return {0, math.max(1, tonumber(redis.call('ZSCORE', KEYS[4], head)) - clock())}
`)

/**
 * The fair hand-over, shared by RELEASE_FAIR, LEAVE and BREAK_FAIR (KEYS as in ACQUIRE_FAIR; ARGV[2] the
 * channel, ARGV[3] the waiter liveness ms, ARGV[4] the key where KEYS[7] is its name), run once the lock is free: the first live waiter becomes the holder
 * right here with a fresh fence, and the message "<owner>:<fence>:<lease ms>" tells it so. That saves the
 * waiter a wake-up and a round trip, and nobody can barge in between. Dead waiters met on the way are
 * dropped. The first lease is no longer than the liveness period: a waiter that died a moment ago then
 * blocks the lock no longer than it would have in the queue, and a live one's first renewal (due within
 * half of it) extends it to its own ttl.
 */
const HAND_OVER = `${CLOCK}${MINT}
while true do
  local head = redis.call('LPOP', KEYS[3])
  if not head then break end
  local alive = tonumber(redis.call('ZSCORE', KEYS[4], head))
  local asked = redis.call('HGET', KEYS[5], head)
  redis.call('ZREM', KEYS[4], head)
  redis.call('HDEL', KEYS[5], head)
  if alive and alive > clock() and asked then
    -- "<ttl ms> <description>": the ttl up to the first space, the description (maybe empty) after it.
    local space = string.find(asked, ' ', 1, true)
    local ttl = tonumber(space and string.sub(asked, 1, space - 1) or asked)
    local lease = math.min(ttl, tonumber(ARGV[3]))
    redis.call('SET', KEYS[1], head, 'PX', lease)
    ${RECORD_NAME(7, 4, 'lease')}
    if space and space < #asked then
      redis.call('SET', KEYS[6], head .. string.sub(asked, space), 'PX', lease)
    end
    redis.call('PUBLISH', ARGV[2], head .. ':' .. string.format('%.0f', mint(lease)) .. ':' .. lease)
    return 1
  end
end
redis.call('PUBLISH', ARGV[2], '')
return 1
`

/** Fair release. ARGV: owner, channel, liveness ms. Owner-checked; then hands over (see HAND_OVER). 1 or 0. */
export const RELEASE_FAIR = script(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[6])
${HAND_OVER}`)

/**
 * Release (plain mode). KEYS: lock[, starving]. ARGV: owner, channel. Deletes the key only if we still own it
 * (never a blind DEL), then publishes on the key's channel so blocked waiters re-attempt at once: "-<owner>"
 * (naming the released owner lets a Redlock waiter, which hears the same release from every node, react
 * to it once), or ">" .. the starving waiter when one is marked (ANNOUNCE).
 */
export const RELEASE = script(`${OWNS}${ANNOUNCE(2, 2)}
local value = redis.call('GET', KEYS[1])
if not value or not owns(value, ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
announce(ARGV[1])
return 1
`)

/**
 * `extend(k, n, owner, ttl)`: the lock at KEYS[k] with its n - 1 keys after it (holder[, fence[, name]]).
 * Moves the expiry only if `owner` still owns the lock. A fence key (or name) that would expire before the
 * lease is kept as long as it (one held for more than MINT's hour still shows its fence, and a break
 * aimed at it finds it); a counter without expiry (Redlock's) is left so. 1 or 0.
 */
const EXTEND_ONE = `${OWNS}
local function extend(k, n, owner, ttl)
  local value = redis.call('GET', KEYS[k])
  if not value or not owns(value, owner) then return 0 end
  redis.call('PEXPIRE', KEYS[k], ttl)
  if n >= 2 then redis.call('PEXPIRE', KEYS[k + 1], ttl) end
  for i = k + 2, k + n - 1 do
    local left = redis.call('PTTL', KEYS[i])
    if left >= 0 and left < tonumber(ttl) then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
  return 1
end
`

/** Extend. KEYS: lock[, holder[, fence[, name]]]. ARGV: owner, ttl ms. 1 or 0 (see EXTEND_ONE). */
export const EXTEND = script(`${EXTEND_ONE}
return extend(1, #KEYS, ARGV[1], ARGV[2])
`)

/**
 * Extend many locks in one round trip (a batch of renewals). KEYS: each lock's keys as EXTEND takes them,
 * one lock after another. ARGV: for each lock, its owner, ttl ms and how many KEYS it has. Returns one 1
 * or 0 per lock, in order. On a Cluster every key of one call must share a slot (the caller groups them).
 */
export const EXTEND_MANY = script(`${EXTEND_ONE}
local out = {}
local k = 1
for a = 1, #ARGV, 3 do
  local n = tonumber(ARGV[a + 2])
  out[#out + 1] = extend(k, n, ARGV[a], ARGV[a + 1])
  k = k + n
end
return out
`)

/**
 * The head of a break (BREAK, BREAK_FAIR): reads the lease and ends it. KEYS: lock, fence, and the holder
 * record at index `h`. ARGV[1]: the fence the lease must have ('' for any). Returns {0} when the lock is
 * free and {2, owner, fence or '', holder record or ''} when the lease has another fence; else deletes the
 * lock and its holder record and goes on.
 */
const BREAK_HEAD = (h: number) => `${HOLDER_OF}
local value = redis.call('GET', KEYS[1])
if not value then return {0} end
local owner, described = holderOf(value, KEYS[${h}])
described = described or ''
local fence = redis.call('GET', KEYS[2]) or ''
if ARGV[1] ~= '' and fence ~= ARGV[1] then return {2, owner, fence, described} end
redis.call('DEL', KEYS[1], KEYS[${h}])
`

/**
 * Break: ends whichever lease holds the lock (with ARGV[1], only the grant of that fence), an operator's
 * way out of a stuck holder. KEYS: lock, fence, holder[, starving]. ARGV: fence or '', channel. The fence key stays, so
 * the next grant mints a larger fence; the message is a release's (ANNOUNCE), so waiters wake alike.
 * Returns {1, owner, fence, holder record} when it ended the lease, {2, …} when another grant holds it,
 * {0} when free. One script: the lease it ends is the lease it read.
 */
export const BREAK = script(`${ANNOUNCE(4, 2)}${BREAK_HEAD(3)}
announce(owner)
return {1, owner, fence, described}
`)

/**
 * Fair break: BREAK, then the lock goes to the first live waiter as on a release (HAND_OVER). KEYS as in
 * ACQUIRE_FAIR; ARGV: fence or '', channel, waiter liveness ms. Replies as BREAK.
 */
export const BREAK_FAIR = script(`
local function handOver()
${HAND_OVER}end
${BREAK_HEAD(6)}
handOver()
return {1, owner, fence, described}
`)

/**
 * Leave the fair queue (an acquire gave up). ARGV: owner, channel, liveness ms. If a release handed us the lock just
 * as we gave up, pass it on at once rather than hold it for a whole ttl; if we were at the head of the
 * queue of a free lock, hand it over to the next waiter.
 */
export const LEAVE = script(`
local holds = redis.call('GET', KEYS[1]) == ARGV[1]
local wasHead = redis.call('LINDEX', KEYS[3], 0) == ARGV[1]
redis.call('LREM', KEYS[3], 0, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
if holds then redis.call('DEL', KEYS[1], KEYS[6]) end
if holds or (wasHead and redis.call('EXISTS', KEYS[1]) == 0) then
${HAND_OVER}end
return 1
`)

/**
 * Raise the fence counter to at least ARGV[1] (never lower it). Redlock writes the token it minted back to
 * the nodes of its majority whose counter was behind, so that any later majority, which shares a node with
 * this one, mints a larger token. Returns the counter afterwards.
 */
export const RAISE_FENCE = script(`
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = tonumber(ARGV[1])
if current < wanted then
  redis.call('SET', KEYS[1], ARGV[1])
  return wanted
end
return current
`)

/**
 * Inspect. KEYS: lock, fence[, holder]. Owner id (or false), remaining ms, fence counter and the holder
 * record (or false; HOLDER_OF), in one consistent read.
 */
export const INSPECT = script(`${HOLDER_OF}
local owner, described = redis.call('GET', KEYS[1]), false
if owner then owner, described = holderOf(owner, KEYS[3]) end
return {owner, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), described}
`)
