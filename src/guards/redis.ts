/**
 * Fence guards on Redis (`fencelock/guards/redis`): a value written only by a holder whose fence is not
 * older than the one stored with it (`guardedSet`), and a shared fence store for the HTTP guard
 * (`redisFenceStore`). Each is one Lua script, so the check and the write are atomic on the server.
 * Works with any lock backend; takes the application's ioredis client (or anything with its `eval`).
 *
 * Layout: a guarded value is a hash, `value` and `fence` fields, read back with `readGuarded` (or HGET).
 * Fences travel as decimal strings and are compared as digit strings (longer is greater, then
 * byte order), never as Lua numbers: those are doubles, and fences above 2^53 that differ by one would
 * compare equal. A guarded key is as durable as the Redis it lives on: a failover to a replica that had
 * not received the last write can take a fence back (use `WAIT`, or a store with synchronous commits).
 */
import type { FenceStore } from './fence-store.js'
import { fenceDigits } from './fence-value.js'

/** The one method used: ioredis's `eval(script, numberOfKeys, ...keysAndArgs)`. */
export interface RedisEval {
  /** Runs a Lua `script` on the first `numberOfKeys` of `keysAndArgs` as KEYS, the rest as ARGV. */
  eval(script: string, numberOfKeys: number, ...keysAndArgs: string[]): Promise<unknown>
}

/** `older(a, b)`: whether fence digits `a` are a smaller number than `b` (no leading zeros). */
const OLDER = `local function older(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
`

// KEYS[1]: the guarded hash; ARGV[1]: the value; ARGV[2]: the writer's fence digits.
// Returns 1 when written, 0 when the stored fence is greater (nothing changed).
const GUARDED_SET = `${OLDER}
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored and older(ARGV[2], stored) then return 0 end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'fence', ARGV[2])
return 1`

// KEYS[1]: the guarded hash. Returns { value, fence } (nil for each missing field).
const READ_GUARDED = `return redis.call('HMGET', KEYS[1], 'value', 'fence')`

// KEYS[1]: the resource's fence key; ARGV[1]: the request's fence digits. Returns the fence recorded.
const ADVANCE = `${OLDER}
local stored = redis.call('GET', KEYS[1])
if stored and older(ARGV[1], stored) then return stored end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]`

/**
 * Writes `value` to the hash `key` with `fence`, only if the fence stored there is not greater (or
 * none is), in one script. Returns false when a later holder has written: your lock is stale, stop.
 * @throws TypeError when `fence` is not a lock's fence; the server's error (WRONGTYPE) when `key` holds
 * something else than a guarded hash.
 * @example
 * await using lock = await locks.acquire('config:flags')
 * if (!(await guardedSet(redis, 'config:flags', JSON.stringify(flags), lock.fence)))
 *   throw new Error('a later holder of config:flags has written; giving up')
 */
export async function guardedSet(
  redis: RedisEval,
  key: string,
  value: string,
  fence: bigint,
): Promise<boolean> {
  const digits = fenceDigits(fence, `for guardedSet of ${JSON.stringify(key)} on Redis`)
  return (await redis.eval(GUARDED_SET, 1, key, value, digits)) === 1
}

/**
 * The value `guardedSet` stored at `key` and the fence it was written with; undefined when none.
 * @example
 * const current = await readGuarded(redis, 'config:flags') // { value: '{…}', fence: 42n } or undefined
 */
export async function readGuarded(
  redis: RedisEval,
  key: string,
): Promise<{ value: string; fence: bigint } | undefined> {
  const [value, fence] = (await redis.eval(READ_GUARDED, 1, key)) as [string | null, string | null]
  if (value === null || fence === null) return undefined
  return { value, fence: BigInt(fence) }
}

/** Options of `redisFenceStore`. */
export interface RedisFenceStoreOptions {
  /** Prefix of the keys that keep each resource's last fence. @default 'fencelock:guard:' */
  readonly prefix?: string | undefined
}

/**
 * A fence store for the HTTP guard shared by every server instance on one Redis: one string key per
 * resource ever guarded (never expired: forgetting a fence would admit its stale holders again).
 * @example
 * import { guardHttpListener } from 'fencelock/guards/http'
 *
 * const store = redisFenceStore(redis)
 * const listener = guardHttpListener({ resource: (req) => req.url, store }, (_req, res) => {
 *   res.end('written')
 * })
 */
export function redisFenceStore(redis: RedisEval, options: RedisFenceStoreOptions = {}): FenceStore {
  const prefix = options.prefix ?? 'fencelock:guard:'
  return {
    async advance(resource, fence) {
      const digits = fenceDigits(fence, `for the fence of ${JSON.stringify(resource)} on Redis`)
      return BigInt((await redis.eval(ADVANCE, 1, `${prefix}${resource}`, digits)) as string)
    },
  }
}
