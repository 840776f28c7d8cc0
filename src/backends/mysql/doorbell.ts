/**
 * Waking waiters without notifications: a doorbell per lock, a named lock of `GET_LOCK`.
 *
 * - The holder rings: each client runs its lease statements on a few connections of its own
 *   (`LeaseConnections`), and the grant itself takes the lock's bell on the one it ran on
 *   (`GET_LOCK(bell, 0)` inside the acquire statement), the release frees it (inside the release
 *   statement). No extra statement, no window between the grant and the bell.
 * - A waiter reads the lease left, then blocks in one statement (statements.ts, `leaseLeftSql`, `ringSql`)
 *   until the bell is freed, the holder's lease ends or 5 s pass, on a connection of its own; the waiters
 *   of one key in one process share that one wait, and the engine wakes one of them when it ends. A client runs at most a share of its pool's
 *   connections as waits (adapter.ts), so waits never take the connections its renewals need; the
 *   waiters of keys beyond it poll.
 * - The bell is a hint, never a grant: after it rings the waiter attempts the lease row, which alone
 *   decides. A holder whose lease connection was lost (or whose process is paused) cannot keep waiters
 *   asleep past its lease: the wait's timeout is the lease the server has left. A bell missing while the
 *   row is held (a reconnected holder until its next renewal takes it again; a holder with the doorbell
 *   off) costs a 20 ms grace once, then two statements per two seconds.
 */
import type { Pool, PoolConnection } from 'mysql2/promise'
import { BoundedMap } from '../../core/bounded-map.js'
import { freeBellSql, ringSql, SESSION_SETTINGS } from './statements.js'

/** Keys whose last doorbell wait found no bell (bounded: forgetting one costs one short grace). */
const DEGRADED_KEPT = 10_000

/** How a lease statement touched a key's bell, known from its result. */
export type BellEffect = 'took' | 'freed' | undefined

/** The bell a lease statement is about, and how to read from its result what it did to it. */
export interface BellUse {
  readonly bell: string
  readonly effect: (result: unknown) => BellEffect
}

/** A connection of the pool that lease statements run on, and the statements running on it now. */
interface Lane {
  readonly connection: Promise<PoolConnection>
  running: number
  /** When its oldest running statement was sent (monotonic ms). */
  busySince: number
  /** Statements running on it whose callers gave up (a partition that sends no reset may keep them). */
  abandoned: number
}

/**
 * The holder's side: the connections a client's lease statements run on (acquire, extend, release), which
 * hold the bells of its leases; the bells ride in those statements (statements.ts), so ringing costs
 * nothing. A statement goes to the connection holding its key's bell when that one is idle, else to any
 * idle one, else to a new one (up to `maxLanes`): a statement that waits on a row lock someone else holds
 * (an operator's `SELECT … FOR UPDATE`) holds up only itself, never the renewals and grants of the
 * client's other keys. A bell stays on the connection that took it; a release that ran elsewhere frees it
 * there by a statement of its own. A connection that fails is dropped (the server frees its bells; the next
 * renewal of each lease takes its bell again) and the next statement gets another. mysql2 runs one
 * connection's statements in order.
 */
export class LeaseConnections {
  readonly #pool: Pool
  readonly #maxLanes: number
  readonly #lanes: Lane[] = []
  /** Which connection holds each bell this client took (as far as the statements' results tell). */
  readonly #bells = new Map<string, Lane>()
  #closed = false

  constructor(pool: Pool, maxLanes: number) {
    this.#pool = pool
    this.#maxLanes = maxLanes
  }

  /**
   * Runs a prepared statement (prepared once per connection by mysql2). A statement whose caller gave up
   * (`signal` aborted) while it was still running may be stuck (a partition that sends no reset): its
   * connection is retired once every statement on it was given up and another is needed, and destroyed
   * once they settle, so one dead connection never holds up the client's later statements.
   */
  async execute(
    sql: string,
    params: (string | number | null)[],
    signal?: AbortSignal,
    use?: BellUse,
  ): Promise<unknown> {
    if (this.#closed) throw new Error('the lock client is closed')
    const lane = this.#choose(use?.bell)
    if (lane.running++ === 0) lane.busySince = performance.now()
    let gaveUp = false
    const onAbort = () => {
      gaveUp = true
      lane.abandoned++
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      const [result] = await (await lane.connection).execute(sql, params)
      if (use) this.#record(use.bell, use.effect(result), lane)
      return result
    } catch (error) {
      // A statement the server refused leaves the connection usable; a lost one does not.
      if ((error as { fatal?: boolean }).fatal !== false) this.#drop(lane, true)
      throw error
    } finally {
      signal?.removeEventListener('abort', onAbort)
      lane.running--
      if (gaveUp) lane.abandoned--
    }
  }

  /** The connection for a statement about `bell` (see the class). */
  #choose(bell: string | undefined): Lane {
    const own = bell === undefined ? undefined : this.#bells.get(bell)
    if (own !== undefined && own.running === 0) return own
    const idle = this.#lanes.find((lane) => lane.running === 0)
    if (idle !== undefined) return idle
    // Connections whose every statement was given up are presumed stuck: make room for fresh ones.
    for (const lane of [...this.#lanes])
      if (lane.abandoned > 0 && lane.abandoned === lane.running) this.#drop(lane, false)
    if (this.#lanes.length < this.#maxLanes) {
      const lane: Lane = { connection: this.#open(), running: 0, busySince: 0, abandoned: 0 }
      // An unused failed connection is dropped at its first statement (`execute`'s catch).
      lane.connection.catch(() => {})
      this.#lanes.push(lane)
      return lane
    }
    // All busy: the one busy for the shortest time (a statement waiting on a row lock stays busy longest).
    return this.#lanes.reduce((best, lane) => (lane.busySince > best.busySince ? lane : best))
  }

  /** What a statement on `lane` did to `bell`. */
  #record(bell: string, effect: BellEffect, lane: Lane): void {
    const holder = this.#bells.get(bell)
    if (effect === 'took' && holder === undefined) this.#bells.set(bell, lane)
    if (effect !== 'freed' || holder === undefined) return
    this.#bells.delete(bell)
    // Freed on another connection than the one holding it (busy when the release ran): free it there too,
    // after whatever runs on it now.
    if (holder !== lane && this.#lanes.includes(holder)) {
      void holder.connection.then((c) => c.execute(freeBellSql, [bell])).catch(() => {})
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

  /**
   * Stops sending to `lane` and forgets its bells (the server frees them with the connection): at once
   * when it failed, else once what runs on it settles.
   */
  #drop(lane: Lane, failed: boolean): void {
    const at = this.#lanes.indexOf(lane)
    if (at < 0) return
    this.#lanes.splice(at, 1)
    for (const [bell, holder] of this.#bells) if (holder === lane) this.#bells.delete(bell)
    void lane.connection
      .then((c) => (failed ? c.destroy() : c.ping().finally(() => c.destroy())))
      .catch(() => {})
  }

  /** Destroys the connections (the server frees every bell they held). */
  async close(): Promise<void> {
    this.#closed = true
    const lanes = this.#lanes.splice(0)
    this.#bells.clear()
    await Promise.all(lanes.map(async (lane) => (await lane.connection.catch(() => undefined))?.destroy()))
  }
}

/** The waiters' side: one blocking doorbell wait per key per client, shared by its waiters. */
export class DoorbellWaits {
  readonly #pool: Pool
  readonly #sql: { readonly leaseLeft: string }
  /** The most doorbell statements at once (each holds a pool connection while it blocks). */
  readonly #max: number
  readonly #waits = new Map<string, { done: Promise<void>; stop: () => void }>()
  /** Keys whose last wait found the row held and no bell: the next wait sleeps long instead of returning. */
  readonly #degraded = new BoundedMap<string, true>(DEGRADED_KEPT)

  constructor(pool: Pool, sql: { readonly leaseLeft: string }, max: number) {
    this.#pool = pool
    this.#sql = sql
    this.#max = max
  }

  /**
   * Resolves when `bell` rang, the holder's lease ended, the row is free, the wait's bound passed, or
   * `signal` aborted. Never rejects. With `max` keys waited on already, resolves only when `signal` aborts:
   * that waiter polls at the engine's pace instead of taking another connection.
   */
  wait(key: string, bell: string, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.resolve()
    let shared = this.#waits.get(key)
    if (shared === undefined && this.#waits.size >= this.#max) {
      return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
    }
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
      // for the next one, and ends by itself when the bell rings, the holder's lease ends or its bound
      // passes (`DOORBELL_WAIT_MAX_S`: a waiter that gave up keeps the connection no longer than that).
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
        // Prepared: the parameters never pass through mysql2's escaping (wrong under NO_BACKSLASH_ESCAPES).
        const [held] = await connection.execute(this.#sql.leaseLeft, [key])
        const rem = (held as { rem: string | number }[])[0]?.rem
        if (rem === undefined) {
          // Free: nothing to wait for.
          connection.release()
          return
        }
        const left = Number(rem)
        const long = this.#degraded.has(key) ? 1 : 0
        const [rows] = await connection.execute(ringSql, [bell, left, bell, bell, left, bell, long, left])
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
