/**
 * The scripts only Redlock runs. Extend and inspect are the Redis backend's, unchanged; the fence comes from
 * the node's counter (MINT, RAISE), not from one counter per name as on a single Redis.
 *
 * The admission scripts (STATE, ADMIT) read the server's run_id with `INFO server` inside the script, so the
 * run_id and what the script reads or writes belong to one and the same server process: no restart can
 * fall between them. Their KEYS[1] is the node's admission marker `<prefix>!admitted` (see admission.ts):
 * the run_id of the server process that was admitted, that is, whose fence counters were caught up (or
 * found fresh) before it voted; KEYS[2] is `<prefix>!fresh`, that run_id again if it was admitted by the
 * bootstrap of a fresh set (then it votes without the delayed restart).
 *
 * The lock scripts (LINE_*) are the Redis backend's acquire and release with the node's waiting line
 * (src/engines/quorum-line.ts). KEYS: 1 the lock `<prefix>{<key>}` (the attempt's owner id, PX = its lease),
 * 2 the hold's fence `<prefix>{<key>}:fence` (what this node minted for the hold, or the token written back
 * to it; PX = the lease, gone with the hold), 3 the holder record (inspect), 4 the line (a sorted set:
 * waiter -> ticket; equal tickets go by waiter, as on every node), 5 each waiter's liveness deadline (a
 * sorted set: waiter -> ms of the server's clock), 6 the node's fence counter `<prefix>!fence` (one for all
 * names, never expires), 7 for a key with a hashed tag, its name (kept as long as the lease). A waiter in the line is "<acquire's owner id>@<client id>": the first one is woken
 * by publishing its owner id on its client's own channel, `<wake prefix><client id>` (layout.ts), so a
 * release wakes the one process whose turn it is, not every client waiting on the key. The line keys expire
 * with their last waiter, so an idle lock keeps nothing of them. The `while true` loop is no waiting:
 * inside one atomic script it walks past dead waiters to the first live one (or the end of the line).
 */
import { createHash } from 'node:crypto'
import { CLOCK, type Script } from '../redis/scripts.js'

const script = (source: string): Script => ({ source, sha: createHash('sha1').update(source).digest('hex') })

/** The run_id of the server process running the script. */
const RUN_ID = `string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')`

/**
 * The node's state: {run_id, marker or false, fresh or false}, in one atomic step. The node is admitted iff
 * the first two are equal: a server restarted empty has no marker, one restarted from its files has an
 * older run_id in it.
 */
export const STATE = script(`
return {${RUN_ID}, redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}
`)

/**
 * Admit. ARGV[1]: the run_id whose counters were caught up; ARGV[2]: '1' when a bootstrap admits it as part
 * of a fresh set (KEYS[2] then names it too). Writes only if the script runs on that very process (returns
 * 1), else returns 0: a marker written on a server that restarted after its catch-up would otherwise admit
 * a process that has forgotten the counters. (A stale run_id in a marker admits nothing, which is what
 * makes a late or repeated write harmless.)
 * `replicate_commands` lets Redis < 5 write after INFO, whose output differs between runs.
 */
export const ADMIT = script(`
if redis.replicate_commands then redis.replicate_commands() end
if ${RUN_ID} ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[2] == '1' then redis.call('SET', KEYS[2], ARGV[1]) end
return 1
`)

/**
 * FIRST: `first()`, the first live waiter of the line, or false; waiters whose deadline passed are dropped
 * on the way (only the first can hold anyone up, so the others are dropped when they get there). `now` (ms
 * of the server's clock, TIME) is read only when the line has someone in it: an uncontended acquire pays
 * nothing. `wake(prefix, waiter)` publishes the waiter's owner id on its client's channel. Redis < 5 needs
 * `replicate_commands` to write after TIME.
 */
const FIRST = `
if redis.replicate_commands then redis.replicate_commands() end${CLOCK}local function wake(prefix, waiter)
  local at = string.find(waiter, '@', 1, true)
  redis.call('PUBLISH', prefix .. string.sub(waiter, at + 1), string.sub(waiter, 1, at - 1))
end
local function first()
  while true do
    local head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if not head then return false end
    local alive = tonumber(redis.call('ZSCORE', KEYS[5], head))
    if alive and alive > clock() then return head end
    redis.call('ZREM', KEYS[4], head)
    redis.call('ZREM', KEYS[5], head)
  end
end
`

/**
 * `mint()`: the next value of the node's counter (KEYS[6]), for the hold being granted. One counter for
 * every name is what lets a name keep nothing once its holds are over: its next grant still mints more than
 * every earlier one of this node. KEYS[2] is read first: a counter of the name itself, without expiry, is
 * what earlier versions kept (one per name, for good), and the node's counter is raised past it so that
 * the name's fences go on from there; the grant then replaces it with the hold's own fence, which goes
 * with the hold. Formatted with %.0f: Lua prints numbers of 15+ digits in exponent form.
 */
const MINT = `
local function mint()
  local fence = redis.call('INCR', KEYS[6])
  local before = tonumber(redis.call('GET', KEYS[2]) or '0')
  if before and before >= fence then
    fence = before + 1
    redis.call('SET', KEYS[6], string.format('%.0f', fence))
  end
  return fence
end
`

/**
 * Acquire, in line. ARGV: 1 the attempt's owner id, 2 ttl ms, 3 the holder's description (may be empty),
 * 4 the waiter ("<acquire's owner id>@<client id>"), 5 its ticket (0: none yet), 6 the waiter liveness ms,
 * and for a key with a hashed tag, 7 the key, recorded in KEYS[7] for as long as the lease (`list`).
 * Returns {1, fence} when granted: the lock is free and the waiter is first in line, or the line is empty
 * (SET NX PX + INCR, one step, as the Redis backend's ACQUIRE), or the key is already this attempt's (a
 * lost reply). Else {0, ms worth waiting, ticket}: the waiter stands in line at its ticket (with none, where
 * it stood, or behind everyone: the last ticket + 1), its deadline moved to now + liveness; the wait is the
 * holder's PTTL, or, while the lock is free, the time until the first waiter's deadline (if it is dead, the
 * next attempt then passes it). A grant leaves the waiter in line, first: an attempt that loses the round
 * keeps its place, and the holder leaves the line when it releases (LINE_RELEASE), or by its deadline.
 */
export const LINE_ACQUIRE = script(`${FIRST}${MINT}
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
local head = first()
if not owner and (not head or head == ARGV[4]) then
  local fence = mint()
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[2])
  if ARGV[3] ~= '' then redis.call('SET', KEYS[3], ARGV[1] .. ' ' .. ARGV[3], 'PX', ARGV[2]) end
  if KEYS[7] then redis.call('SET', KEYS[7], ARGV[7], 'PX', ARGV[2]) end
  return {1, fence}
end
local ticket = tonumber(ARGV[5])
if ticket == 0 then
  ticket = tonumber(redis.call('ZSCORE', KEYS[4], ARGV[4]))
  if not ticket then
    local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
    ticket = (tonumber(last[2]) or 0) + 1
  end
end
local liveness = tonumber(ARGV[6])
redis.call('ZADD', KEYS[4], ticket, ARGV[4])
redis.call('ZADD', KEYS[5], clock() + liveness, ARGV[4])
redis.call('PEXPIRE', KEYS[4], liveness)
redis.call('PEXPIRE', KEYS[5], liveness)
if owner then return {0, redis.call('PTTL', KEYS[1]), ticket} end
return {0, math.max(1, tonumber(redis.call('ZSCORE', KEYS[5], head)) - clock()), ticket}
`)

/**
 * Release by the holder. ARGV: 1 the attempt's owner id, 2 the wake prefix, 3 the waiter. Deletes the lock
 * only if it is still ours (1, else 0), takes the waiter out of the line either way, and, when the lock is
 * free, wakes the first live waiter left (only it re-attempts; with nobody in line, nobody waits).
 */
export const LINE_RELEASE = script(`${FIRST}
local ours = redis.call('GET', KEYS[1]) == ARGV[1]
if ours then redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) end
redis.call('ZREM', KEYS[4], ARGV[3])
redis.call('ZREM', KEYS[5], ARGV[3])
if ours or redis.call('EXISTS', KEYS[1]) == 0 then
  local head = first()
  if head then wake(ARGV[2], head) end
end
if ours then return 1 end
return 0
`)

/**
 * Clean-up of an attempt that lost its round. ARGV: 1 the attempt's owner id, 2 the wake prefix, 3 the
 * waiter. Deletes the lock only if this attempt holds it (1, else 0); the waiter keeps its place (its acquire
 * goes on). The first live waiter is woken if it is someone else (one that came in line here while this
 * attempt held the node); the waiter itself retries on its own schedule, and waking it here could make a
 * waiter that keeps losing its round spin.
 */
export const LINE_CLEAN_UP = script(`${FIRST}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local head = first()
if head and head ~= ARGV[3] then wake(ARGV[2], head) end
return 1
`)

/**
 * Leave the line: an acquire that gave up. ARGV: 1 its latest attempt's owner id, 2 the wake prefix, 3 the
 * waiter. Deletes the lock if that attempt holds it, takes the waiter out of the line, and, when the lock
 * is free, wakes the first live waiter left: it may have been waiting behind this one.
 */
export const LINE_LEAVE = script(`${FIRST}
local ours = redis.call('GET', KEYS[1]) == ARGV[1]
if ours then redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) end
local queued = redis.call('ZREM', KEYS[4], ARGV[3])
redis.call('ZREM', KEYS[5], ARGV[3])
if (ours or queued == 1) and redis.call('EXISTS', KEYS[1]) == 0 then
  local head = first()
  if head then wake(ARGV[2], head) end
end
return 1
`)

/**
 * Break, on one node: an operator ends a hold. ARGV: 1 the hold's owner id (an attempt's), 2 the wake
 * prefix, 3 its acquire's owner id. Deletes the lock only if that attempt holds it (1, else 0: another
 * grant since, or none), takes its acquire out of the line (it stood there as "<acquire's owner id>@<its
 * client id>", a client the operator does not know: the line of this one key is read to find it), and
 * wakes the first live waiter left, as a release does. The node's counter stays: the next grant mints more.
 */
export const LINE_BREAK = script(`${FIRST}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
local mine = ARGV[3] .. '@'
for _, waiter in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  if string.sub(waiter, 1, #mine) == mine then
    redis.call('ZREM', KEYS[4], waiter)
    redis.call('ZREM', KEYS[5], waiter)
  end
end
local head = first()
if head then wake(ARGV[2], head) end
return 1
`)

/**
 * Raise the node's counter (KEYS[1]) to at least ARGV[1], never lower it. With KEYS[2] and KEYS[3] (a hold's
 * fence and its lock) and ARGV[2] (the attempt's owner id), also the hold's fence, while that attempt holds
 * the lock: the write-back of a grant's token M to the nodes of its majority that were behind, so that any
 * later majority, which shares a node with this one, mints more than M, and the nodes holding it show M
 * (inspect). Alone, a catch-up's (admission.ts). Returns the counter afterwards.
 */
export const RAISE = script(`
local wanted = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < wanted then
  redis.call('SET', KEYS[1], ARGV[1])
  current = wanted
end
if KEYS[3] and redis.call('GET', KEYS[3]) == ARGV[2] then
  local lease = redis.call('PTTL', KEYS[3])
  if lease > 0 and tonumber(redis.call('GET', KEYS[2]) or '0') < wanted then
    redis.call('SET', KEYS[2], ARGV[1], 'PX', lease)
  end
end
return current
`)
