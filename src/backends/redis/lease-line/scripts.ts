/**
 * The Lua that the scripts of every Redis primitive with a line share (../semaphore, ../rwlock): the chunked
 * removal of many members, the owner check that begins every extend and release, and the read-back of a
 * lease whose grant's reply was lost. Each is text spliced into a primitive's own script, with the KEYS and
 * ARGV positions and the helper names that primitive uses, so one check is written once and reads the same
 * in every script.
 */
import { CLOCK, type Script, script } from '../lua.js'

/**
 * `chunked(cmd, key, list)`: runs `cmd key ...list` in chunks of 1000 arguments (Lua's `unpack` has a limit).
 * The loop walks a list already read inside one atomic script: no waiting.
 */
export const CHUNKED = `local function chunked(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end
`

/** Where a primitive's scripts keep a lease and how they read and finish it, for the fragments below. */
export interface LineLua {
  /** The hash of granted owners: `KEYS[n]`. */
  readonly grants: string
  /** The owner's ARGV: `ARGV[n]`. */
  readonly owner: string
  /** The fence or sequence the caller was granted with: `ARGV[n]`. */
  readonly token: string
  /** The Lua function that reads the token from a grant's value. */
  readonly tokenOf: string
  /** The Lua function every writing script ends with, taking `now`. */
  readonly finish: string
}

/**
 * How extend, release (and a downgrade) begin: the clock, the purge, and 0 unless the owner holds the grant
 * of the token: never a blind write, since an acquire of the same owner granted again has another. Leaves
 * `now` to the rest of the script.
 */
export const oursOrZero = (lua: LineLua): string => `
local now = clock()
purge(now)
local grant = redis.call('HGET', ${lua.grants}, ${lua.owner})
if not grant or ${lua.tokenOf}(grant) ~= ${lua.token} then
  ${lua.finish}(now)
  return 0
end
`

/**
 * Read back one owner's lease after an attempt whose reply was lost, without writing. `ends`: the sorted set
 * of lease ends (KEYS[n]); `grants`: the hash of grants (KEYS[n]); `token`: the Lua pattern capturing the
 * fence or sequence from a grant. ARGV: owner. Returns {token, ms left} of its valid lease, or {false, 0}.
 */
export const readBackScript = (ends: string, grants: string, token: string): Script =>
  script(`${CLOCK}
local ends = tonumber(redis.call('ZSCORE', ${ends}, ARGV[1]))
local grant = redis.call('HGET', ${grants}, ARGV[1])
if not ends or not grant or ends <= clock() then return {false, 0} end
return {string.match(grant, '${token}'), ends - clock()}
`)
