/**
 * Listening on a table's channel (the lock, elections or semaphores table's: layout.ts `channelOf`), for
 * the sql engine's waiters. Delivery is proven before it is counted on: behind a transaction-pooling proxy
 * (PgBouncer) LISTEN delivers nothing, and the engine then polls.
 */
import { raceSignal } from '../../core/abort.js'
import type { SqlListener } from '../../engines/sql/adapter.js'
import type { PgSql } from './client.js'

/**
 * Subscribes to `channel` on postgres.js's dedicated listening connection (one per client; it
 * re-subscribes by itself after a reconnect, which `onGap` reports), then proves delivery: an empty
 * notification (no key is empty) sent through the pool must come back on it.
 */
export async function listenProven(
  sql: PgSql,
  channel: string,
  onKey: (key: string) => void,
  onGap: () => void,
  signal: AbortSignal,
): Promise<SqlListener> {
  let proven!: () => void
  const proof = new Promise<void>((resolve) => {
    proven = resolve
  })
  const meta = await raceSignal(
    sql.listen(channel, (payload) => (payload === '' ? proven() : onKey(payload)), onGap),
    signal,
  )
  const listener: SqlListener = { close: () => meta.unlisten() }
  try {
    await raceSignal(sql.unsafe('SELECT pg_catalog.pg_notify($1::text, $2::text)', [channel, '']), signal)
    await raceSignal(proof, signal)
  } catch (error) {
    await listener.close().catch(() => {})
    throw error
  }
  return listener
}
