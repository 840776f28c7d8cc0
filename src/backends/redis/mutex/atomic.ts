/**
 * Atomic multi-key acquisition on Redis: one Lua script checks every key of the set and, only when all are
 * free (or already ours), grants them all, each minting its own fence; no other command runs in between.
 * The leases are the plain mode's own (the lock key "<owner> <description>" with PX, the fence key, the
 * name key of a hashed key), so each key is then extended, released, abandoned and woken on by the mutex
 * (facet.ts) as if a single acquire had taken it.
 *
 * Refused: in fair mode, where each key keeps a line of waiters and a free key is handed to its head: a
 * set taken at once would pass every line. On a Cluster, for keys in more than one slot: a script runs on
 * one node. Each key's names are tagged with the key itself (../keys.ts), so keys share a slot only by the
 * chance of their CRC16: a set on a Cluster is taken one by one.
 */
import { raceSignal } from '../../../core/abort.js'
import type { AcquireRequest, AllAttemptResult, Grant, MultiKeyFacet } from '../../../core/backend.js'
import { BackendUnavailableError, quoteKey } from '../../../core/errors.js'
import { slotOf } from '../keys.js'
import { script } from '../lua.js'
import { isCluster, isReplyError, type RedisStore } from '../store.js'
import type { ReplicaPolicy } from './facet.js'
import type { LockLayout } from './layout.js'
import type { Mode } from './mode.js'
import { MINT, OWNS } from './scripts.js'

/** KEYS per lock in ACQUIRE_ALL: lock, fence, starving, name (the lock key again where it has none). */
const KEYS_PER_LOCK = 4

/**
 * Acquire a set (plain mode). KEYS: per lock, in order, lock, fence, starving and name (or the lock key
 * again: a key without a name key). ARGV: owner, ttl ms, description, then per lock its key where it has a
 * name key, else ''. Refused, writing nothing, while any lock key holds another owner or a live starvation
 * mark names another waiter (a free lock goes to that waiter alone, as ACQUIRE says): {0, ms worth
 * waiting, the longest of those leases and marks}. Else every lock is ours: {1, fence of each}, a lock
 * already ours (an earlier attempt's reply was lost) keeping its fence, as ACQUIRE's `heldFence`.
 */
export const ACQUIRE_ALL = script(`${OWNS}${MINT}
local n = #KEYS / ${KEYS_PER_LOCK}
local wait = 0
local busy = false
for i = 0, n - 1 do
  local lock = KEYS[i * ${KEYS_PER_LOCK} + 1]
  local owner = redis.call('GET', lock)
  local blocker = false
  if owner then
    if not owns(owner, ARGV[1]) then blocker = lock end
  else
    local marked = redis.call('GET', KEYS[i * ${KEYS_PER_LOCK} + 3])
    if marked and marked ~= ARGV[1] then blocker = KEYS[i * ${KEYS_PER_LOCK} + 3] end
  end
  if blocker then
    busy = true
    wait = math.max(wait, redis.call('PTTL', blocker))
  end
end
if busy then return {0, wait} end
local value = ARGV[1]
if ARGV[3] ~= '' then value = value .. ' ' .. ARGV[3] end
local fences = {1}
for i = 0, n - 1 do
  local lock = KEYS[i * ${KEYS_PER_LOCK} + 1]
  local fenceKey = KEYS[i * ${KEYS_PER_LOCK} + 2]
  local fence
  if redis.call('GET', lock) then
    redis.call('PEXPIRE', lock, ARGV[2])
    fence = tonumber(redis.call('GET', fenceKey)) or mintAt(fenceKey, ARGV[2])
  else
    redis.call('SET', lock, value, 'PX', ARGV[2])
    if ARGV[4 + i] ~= '' then
      redis.call('SET', KEYS[i * ${KEYS_PER_LOCK} + 4], ARGV[4 + i], 'PX', math.max(3600000, tonumber(ARGV[2])))
    end
    fence = mintAt(fenceKey, ARGV[2])
  end
  fences[#fences + 1] = string.format('%.0f', fence)
end
return fences
`)

/** What the atomic step is built from: the mutex's store, key names, mode and replica policy. */
export interface RedisAtomicParts {
  readonly store: RedisStore
  readonly layout: LockLayout
  readonly mode: Mode
  readonly replicas: ReplicaPolicy
}

/** The atomic multi-key step of one Redis backend's mutex. */
export class RedisAtomicAcquire implements MultiKeyFacet {
  readonly #parts: RedisAtomicParts

  constructor(parts: RedisAtomicParts) {
    this.#parts = parts
  }

  refusal(keys: readonly string[]): string | undefined {
    const { store, layout, mode } = this.#parts
    if (mode.fifo) {
      return (
        'in fair mode each key keeps its own line of waiters and a free key goes to the head of it; a set ' +
        'taken at once would pass every line. Use the default (plain) mode for atomic sets'
      )
    }
    if (!isCluster(store.client)) return undefined
    const slots = new Set(keys.map((key) => slotOf(layout.keysOf(key).lock)))
    if (slots.size === 1) return undefined
    return (
      `they lie in ${slots.size} slots of the Redis Cluster, and one script runs in one slot. Each key's ` +
      'names are tagged with the whole key (a `{...}` in a key is hashed, not used as a tag), so keys share ' +
      'a slot only by chance'
    )
  }

  async tryAcquireAll(requests: readonly AcquireRequest[], signal: AbortSignal): Promise<AllAttemptResult> {
    const { store, layout } = this.#parts
    const first = requests[0]!
    const keys: string[] = []
    const names: string[] = []
    for (const { key } of requests) {
      const k = layout.keysOf(key)
      keys.push(k.lock, k.fence, k.starving, k.name ?? k.lock)
      names.push(k.name === undefined ? '' : key)
    }
    let reply: unknown
    try {
      reply = await raceSignal(
        store.run(ACQUIRE_ALL, keys, [first.owner, first.ttlMs, first.holder ?? '', ...names], signal),
        signal,
      )
    } catch (error) {
      // No reply: the script may have run. The core treats the outcome as unknown: the next attempt finds
      // the keys ours, or the clean-up (`abandon` of every key) removes them.
      if (isReplyError(error)) throw store.explain(first.key, 'acquire', error, [keys[0]!, keys[1]!])
      throw error
    }
    const [granted, ...rest] = reply as [number, ...Array<number | string>]
    if (granted !== 1) {
      const wait = Number(rest[0])
      return wait > 0 ? { granted: false, retryInMs: wait } : { granted: false }
    }
    const grants: Grant[] = rest.map((fence, i) => ({
      granted: true,
      fence: BigInt(fence),
      ttlMs: requests[i]!.ttlMs,
    }))
    if (this.#parts.replicas.min > 0) await this.#awaitReplicas(requests)
    return { granted: true, grants }
  }

  /** WAIT on the connection that wrote the locks; too few acknowledgements: release them all and fail. */
  async #awaitReplicas(requests: readonly AcquireRequest[]): Promise<void> {
    const { store, mode, replicas } = this.#parts
    const { min, timeoutMs } = replicas
    const acks = await store.replicasAcknowledging(min, timeoutMs)
    if (acks >= min) return
    await Promise.all(requests.map((req) => mode.release(req)))
    throw new BackendUnavailableError(
      `Only ${acks} of the ${min} replicas required by \`minReplicas\` acknowledged locks ` +
        `${requests.map((req) => quoteKey(req.key)).join(', ')} on ${store.id} within ${timeoutMs} ms, so ` +
        'they were released. Check the replicas (INFO replication)',
      { key: requests[0]!.key, backend: store.id },
    )
  }
}
