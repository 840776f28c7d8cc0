/**
 * SCAN on one Redis server (also each Redlock node), a page at a time: a primitive's `list` walks its keys
 * with it. SCAN walks the whole keyspace of the server in steps of about `count` keys; MATCH only trims
 * each step's reply, so a listing costs one SCAN per step whatever the prefix.
 */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../core/abort.js'
import { within } from '../../core/within.js'

/** The SCAN COUNT hint of one step: about this many keys looked at per round trip. */
export const SCAN_COUNT = 500

/**
 * The key names matching `pattern` on one server, a SCAN step at a time (a step may find none). The loop
 * ends when the server says the scan is complete (cursor 0); each step is bounded by `signal`, and by
 * `stepMs` when given (a Redlock node that stopped answering must not hold up the listing).
 */
export async function* scanPages(
  server: Redis,
  pattern: string,
  signal: AbortSignal,
  stepMs?: number,
): AsyncGenerator<string[]> {
  let cursor = '0'
  do {
    const step = (s: AbortSignal) => raceSignal(server.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT), s)
    const [next, names] = await (stepMs === undefined ? step(signal) : within(stepMs, signal, step))
    if (names.length > 0) yield names
    cursor = next
  } while (cursor !== '0')
}
