/**
 * The fence counters of one node, in bulk, for a catch-up (admission.ts): the node's counter
 * `<prefix>!fence`, and the counters one per name that earlier versions kept (and each hold's own fence,
 * which is never above the node's counter), found under the prefix with SCAN MATCH and one MGET per page;
 * and raising the node's counter to the largest of them (RAISE). Each round trip is bounded by STEP_MS; the
 * SCAN cursor loops end when the server says the scan is complete.
 */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../core/abort.js'
import { within } from '../../core/within.js'
import { STEP_MS } from './admission-state.js'
import { nodeCounter } from './layout.js'
import { RAISE } from './scripts.js'

/**
 * The node's counter under a prefix, the redis glob pattern of the names' fence keys, and the exact test of
 * one key name.
 */
export interface FenceKeys {
  readonly counter: string
  readonly pattern: string
  readonly test: (key: string) => boolean
}

/** The fence keys under `prefix`. */
export function fenceKeys(prefix: string): FenceKeys {
  const glob = prefix.replace(/[*?[\]\\]/g, '\\$&')
  const exact = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\{[^{}]*\\}:fence$`)
  // A tag never holds a brace (keys with one are hashed, see the Redis backend), so this is exact.
  return { counter: nodeCounter(prefix), pattern: `${glob}{*}:fence`, test: (key) => exact.test(key) }
}

/** The node's counter and every name's fence key under the prefix: SCAN MATCH, one MGET per page. */
export async function readFences(
  client: Redis,
  fences: FenceKeys,
  closed: AbortSignal,
): Promise<Map<string, bigint>> {
  const out = new Map<string, bigint>()
  const counter = await within(STEP_MS, closed, (s) => raceSignal(client.get(fences.counter), s))
  if (typeof counter === 'string' && /^\d+$/.test(counter)) out.set(fences.counter, BigInt(counter))
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
  const counter = await within(STEP_MS, closed, (s) => raceSignal(client.exists(fences.counter), s))
  if (counter > 0) return fences.counter
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

/**
 * Raises the node's counter to the largest of `values` (RAISE, never lowers it): every value some node
 * held, whether in its own counter or in a name's, is then below what this node mints next.
 */
export async function raiseCounter(
  client: Redis,
  fences: FenceKeys,
  values: ReadonlyMap<string, bigint>,
  signal: AbortSignal,
): Promise<void> {
  let highest = 0n
  for (const value of values.values()) if (value > highest) highest = value
  const raise = () =>
    within(STEP_MS, signal, () => client.evalsha(RAISE.sha, 1, fences.counter, String(highest)))
  try {
    await raise()
  } catch (error) {
    // A server that lost its scripts (a restart: then its run_id changed too, and ADMIT will refuse) or had
    // them flushed: load it and raise again, once (raising is idempotent).
    if (!/NOSCRIPT/.test((error as Error)?.message ?? '')) throw error
    await within(STEP_MS, signal, () => client.script('LOAD', RAISE.source))
    await raise()
  }
}
