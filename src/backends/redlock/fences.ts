/**
 * The fence counters of one node, in bulk, for a catch-up (admission.ts): find them under the prefix (SCAN
 * MATCH, then one MGET per page) and raise them (RAISE_FENCE, pipelined). Each round trip is bounded by
 * STEP_MS; the SCAN cursor loops end when the server says the scan is complete.
 */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../core/abort.js'
import { within } from '../../core/within.js'
import { RAISE_FENCE } from '../redis/scripts.js'
import { STEP_MS } from './admission-state.js'

/** The redis glob pattern of the fence keys under a prefix, and the exact test of one key name. */
export interface FenceKeys {
  readonly pattern: string
  readonly test: (key: string) => boolean
}

/** The fence keys under `prefix`. */
export function fenceKeys(prefix: string): FenceKeys {
  const glob = prefix.replace(/[*?[\]\\]/g, '\\$&')
  const exact = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\{[^{}]*\\}:fence$`)
  // A tag never holds a brace (keys with one are hashed, see the Redis backend), so this is exact.
  return { pattern: `${glob}{*}:fence`, test: (key) => exact.test(key) }
}

/** Every fence counter under the prefix: SCAN MATCH, one MGET per page. */
export async function readFences(
  client: Redis,
  fences: FenceKeys,
  closed: AbortSignal,
): Promise<Map<string, bigint>> {
  const out = new Map<string, bigint>()
  let cursor = '0'
  do {
    const page = await within(STEP_MS, closed, async (s) => {
      const [next, keys] = await raceSignal(client.scan(cursor, 'MATCH', fences.pattern, 'COUNT', 1000), s)
      const ours = keys.filter(fences.test)
      const values = ours.length > 0 ? await raceSignal(client.mget(ours), s) : []
      return { next, ours, values }
    })
    page.ours.forEach((key, i) => {
      const v = page.values[i]
      // Anything but a whole number is not a fencelock counter (an acquire on it would fail anyway).
      if (typeof v === 'string' && /^\d+$/.test(v)) out.set(key, BigInt(v))
    })
    cursor = page.next
  } while (cursor !== '0')
  return out
}

/** The name of one fence counter under the prefix, or undefined if there is none (for a bootstrap). */
export async function firstFence(
  client: Redis,
  fences: FenceKeys,
  closed: AbortSignal,
): Promise<string | undefined> {
  let cursor = '0'
  do {
    const [next, keys] = await within(STEP_MS, closed, (s) =>
      raceSignal(client.scan(cursor, 'MATCH', fences.pattern, 'COUNT', 1000), s),
    )
    const hit = keys.find(fences.test)
    if (hit !== undefined) return hit
    cursor = next
  } while (cursor !== '0')
  return undefined
}

/** Raises each counter of `values` on `client` (RAISE_FENCE, never lowers), in pipelined batches. */
export async function raiseAll(client: Redis, values: ReadonlyMap<string, bigint>, signal: AbortSignal) {
  const entries = [...values]
  for (let i = 0; i < entries.length; i += 500) await raiseBatch(client, entries.slice(i, i + 500), signal)
}

async function raiseBatch(client: Redis, batch: ReadonlyArray<[string, bigint]>, signal: AbortSignal) {
  const failed = await raiseOnce(client, batch, signal)
  if (!failed) return
  // A server that lost its scripts (a restart: then its run_id changed too, and ADMIT will refuse) or had
  // them flushed: load it and raise the batch again, once (raising is idempotent).
  if (!/NOSCRIPT/.test(failed.message)) throw failed
  await within(STEP_MS, signal, () => client.script('LOAD', RAISE_FENCE.source))
  const again = await raiseOnce(client, batch, signal)
  if (again) throw again
}

/** One pipelined raise of `batch`: the first error among the replies, if any. */
async function raiseOnce(
  client: Redis,
  batch: ReadonlyArray<[string, bigint]>,
  signal: AbortSignal,
): Promise<Error | undefined> {
  if (signal.aborted) throw signal.reason
  const pipeline = client.pipeline()
  for (const [key, value] of batch) pipeline.evalsha(RAISE_FENCE.sha, 1, key, String(value))
  const replies = (await within(STEP_MS, signal, () => pipeline.exec())) ?? []
  return replies.find(([error]) => error)?.[0] ?? undefined
}
