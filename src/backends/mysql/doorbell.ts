/**
 * Waking waiters without notifications: a doorbell per lock, a named lock of `GET_LOCK`.
 *
 * - The holder rings: each client runs its lease statements on one connection (`LeaseConnection`), and
 *   the grant itself takes the lock's bell on it (`GET_LOCK(bell, 0)` inside the acquire statement), the
 *   release frees it (inside the release statement). No extra statement, no window between the grant and
 *   the bell.
 * - A waiter blocks in one statement (statements.ts, `watchSql`) until the bell is freed or the holder's
 *   lease ends, on a connection of its own; the waiters of one key in one process share that one wait.
 * - The bell is a hint, never a grant: after it rings the waiter attempts the lease row, which alone
 *   decides. A holder whose lease connection was lost (or whose process is paused) cannot keep waiters
 *   asleep past its lease: the wait's timeout is the lease the server has left. A bell missing while the
 *   row is held (a reconnected holder until its next renewal takes it again; a holder with the doorbell
 *   off) costs a 20 ms grace once, then one statement per two seconds.
 */
import type { Pool, PoolConnection } from 'mysql2/promise'
import { BoundedMap } from '../../core/bounded-map.js'
import { SESSION_SETTINGS } from './statements.js'

/** Keys whose last doorbell wait found no bell (bounded: forgetting one costs one short grace). */
const DEGRADED_KEPT = 10_000

/**
 * The holder's side: the connection a client's lease statements run on (acquire, extend, release), which
 * holds the bells of its leases; they ride in those statements (statements.ts), so ringing costs nothing.
 * mysql2 runs one connection's statements in order. A connection that fails is dropped (the server frees
 * its bells; the next renewal of each lease takes its bell again) and the next statement gets another.
 */
export class LeaseConnection {
  readonly #pool: Pool
  #connection: Promise<PoolConnection> | undefined
  /** Statements on the current connection whose callers gave up while they ran. */
  #abandoned = 0
  #closed = false

  constructor(pool: Pool) {
    this.#pool = pool
  }

  /**
   * Runs a prepared statement (prepared once per connection by mysql2). A statement whose caller gave up
   * (`signal` aborted) while it was still running may be stuck (a partition that sends no reset): the
   * next statement then goes to a fresh connection, and the stuck one is destroyed once it settles, so one
   * dead connection never holds up every later statement of the client.
   */
  async execute(sql: string, params: (string | number | null)[], signal?: AbortSignal): Promise<unknown> {
    if (this.#closed) throw new Error('the lock client is closed')
    if (this.#abandoned > 0 && this.#connection) this.#retire(this.#connection)
    this.#connection ??= this.#open()
    const connection = this.#connection
    let gaveUp = false
    const onAbort = () => {
      gaveUp = true
      if (this.#connection === connection) this.#abandoned++
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      const [result] = await (await connection).execute(sql, params)
      return result
    } catch (error) {
      // A statement the server refused leaves the connection usable; a lost one does not.
      if ((error as { fatal?: boolean }).fatal !== false) this.#drop(connection)
      throw error
    } finally {
      signal?.removeEventListener('abort', onAbort)
      if (gaveUp && this.#connection === connection) this.#abandoned--
    }
  }

  /** A connection of the pool in fencelock's own session settings (destroyed, never given back). */
  async #open(): Promise<PoolConnection> {
    const connection = await this.#pool.getConnection()
    try {
      await connection.query(SESSION_SETTINGS)
      return connection
    } catch (error) {
      connection.destroy()
      throw error
    }
  }

  /** Stops sending to `connection`; destroys it once what runs on it settles. */
  #retire(connection: Promise<PoolConnection>): void {
    this.#connection = undefined
    this.#abandoned = 0
    void connection.then((c) => c.ping().finally(() => c.destroy())).catch(() => {})
  }

  #drop(connection: Promise<PoolConnection>): void {
    if (this.#connection !== connection) return
    this.#connection = undefined
    this.#abandoned = 0
    void connection.then((c) => c.destroy()).catch(() => {})
  }

  /** Destroys the connection (the server frees every bell it held). */
  async close(): Promise<void> {
    this.#closed = true
    const connection = this.#connection
    this.#connection = undefined
    if (connection) (await connection.catch(() => undefined))?.destroy()
  }
}

/** The waiters' side: one blocking doorbell wait per key per client, shared by its waiters. */
export class DoorbellWaits {
  readonly #pool: Pool
  readonly #sql: string
  readonly #waits = new Map<string, { done: Promise<void>; stop: () => void }>()
  /** Keys whose last wait found the row held and no bell: the next wait sleeps long instead of returning. */
  readonly #degraded = new BoundedMap<string, true>(DEGRADED_KEPT)

  constructor(pool: Pool, sql: string) {
    this.#pool = pool
    this.#sql = sql
  }

  /** Resolves when `bell` rang, the holder's lease ended, the row is free, or `signal` aborted. Never rejects. */
  wait(key: string, bell: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.resolve()
    let shared = this.#waits.get(key)
    if (shared === undefined) {
      shared = this.#start(key, bell)
      this.#waits.set(key, shared)
    }
    const entry = shared
    return new Promise<void>((resolve) => {
      const leave = () => {
        signal.removeEventListener('abort', onAbort)
        resolve()
      }
      // The core re-arms its hint every second or so (abort, then a new wait): the statement keeps running
      // for the next one, and ends by itself when the bell rings or the holder's lease ends.
      const onAbort = () => leave()
      signal.addEventListener('abort', onAbort, { once: true })
      void entry.done.then(leave)
    })
  }

  /** Ends every wait (their statements on the server too). */
  close(): void {
    for (const entry of this.#waits.values()) entry.stop()
    this.#waits.clear()
  }

  #start(key: string, bell: string): { done: Promise<void>; stop: () => void } {
    const entry = { done: Promise.resolve(), stop: () => {} }
    let connection: PoolConnection | undefined
    let stopped = false
    const stop = () => {
      stopped = true
      // The statement blocks the connection: end it on the server (its thread id), then drop the socket.
      if (connection !== undefined) {
        void this.#pool.query('KILL ?', [connection.threadId]).catch(() => {})
        connection.destroy()
      }
    }
    const done = (async () => {
      try {
        connection = await this.#pool.getConnection()
        if (stopped) {
          connection.destroy()
          return
        }
        const long = this.#degraded.has(key) ? 1 : 0
        // Prepared: the parameters never pass through mysql2's escaping (wrong under NO_BACKSLASH_ESCAPES).
        const [rows] = await connection.execute(this.#sql, [bell, bell, bell, bell, long, key])
        connection.release()
        // -1: no bell after the grace (a holder that just got the lease, or one without its bell): once is
        // a short look; twice in a row, the next wait sleeps two seconds on the server.
        if ((rows as { rang: number | null }[])[0]?.rang === -1) this.#degraded.set(key, true)
        else this.#degraded.delete(key)
      } catch {
        // A wait that failed is a spurious wake-up: the waiter attempts again, and that attempt reports
        // the failure if the server is really gone.
        connection?.destroy()
      } finally {
        if (this.#waits.get(key) === entry) this.#waits.delete(key)
      }
    })()
    entry.done = done
    entry.stop = stop
    return entry
  }
}
