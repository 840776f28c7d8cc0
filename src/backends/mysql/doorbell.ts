/**
 * Waking waiters without notifications: a doorbell per lock, a named lock of `GET_LOCK`.
 *
 * - The holder rings: while it holds a lease it keeps the lock's doorbell (`GET_LOCK(bell)`) on ONE
 *   connection per client (`Bells`), taken RING_DELAY_MS after a grant and freed after its release. The
 *   grant and the release never wait for it: it runs on its own connection, in order, behind them. A
 *   lease released within RING_DELAY_MS never rings (no statement): short critical sections cost
 *   nothing more, and a waiter's grace (statements.ts) covers the delay.
 * - A waiter blocks in one statement (statements.ts, `watchSql`) until the bell is freed or the holder's
 *   lease ends, on a connection of its own; the waiters of one key in one process share that one wait.
 * - The bell is a hint, never a grant: after it rings the waiter attempts the lease row, which alone
 *   decides. A holder whose doorbell connection was lost (or whose process is paused) cannot keep waiters
 *   asleep past its lease: the wait's timeout is the lease the server has left; a bell missing while the
 *   row is held degrades to a short grace once, then to one statement per two seconds. A lost bell is
 *   taken again at the next renewal.
 *
 * The one timer of the folder (a ticker every RING_DELAY_MS while grants come) spares the short leases
 * their two bell statements.
 */
import type { Pool, PoolConnection } from 'mysql2/promise'
import { BoundedMap } from '../../core/bounded-map.js'

/** A lease still held this long after its grant rings its bell; one released sooner never does. */
export const RING_DELAY_MS = 2
/** The ticker stops after this many ticks without a pending ring (100 ms). */
const IDLE_TICKS = 50
/** Keys whose last doorbell wait found no bell (bounded: forgetting one costs one short grace). */
const DEGRADED_KEPT = 10_000

/** The holder's side: the doorbells of the leases this client holds, on one connection of the pool. */
export class Bells {
  readonly #pool: Pool
  /** Bells we want held, and whether the connection holds each yet. */
  readonly #wanted = new Map<string, boolean>()
  /** Rings not yet due, and when they are (RING_DELAY_MS after their grant; monotonic ms). */
  readonly #due = new Map<string, number>()
  #ticker: NodeJS.Timeout | undefined
  #idleTicks = 0
  #connection: Promise<PoolConnection> | undefined
  /** Every bell statement runs after the previous one: a take and its release never cross. */
  #queue: Promise<void> = Promise.resolve()

  constructor(pool: Pool) {
    this.#pool = pool
  }

  /** After a grant: hold `bell` from RING_DELAY_MS on, unless released by then. */
  ring(bell: string): void {
    if (this.#wanted.has(bell)) return
    this.#wanted.set(bell, false)
    this.#due.set(bell, performance.now() + RING_DELAY_MS)
    if (this.#ticker === undefined) {
      this.#idleTicks = 0
      this.#ticker = setInterval(this.#tick, RING_DELAY_MS)
      this.#ticker.unref()
    }
  }

  /**
   * Takes the bells whose delay has passed. One ticker for all of them, kept while grants come: setting
   * and clearing a timer per grant cost more than a short lease's whole cycle (measured, ~0.1 ms); a
   * ticker costs one wake-up per RING_DELAY_MS while in use, and stops after IDLE_TICKS without grants.
   */
  #tick = (): void => {
    const t = performance.now()
    for (const [bell, at] of this.#due) {
      if (at > t) continue
      this.#due.delete(bell)
      this.#take(bell)
    }
    if (this.#due.size > 0) this.#idleTicks = 0
    else if (++this.#idleTicks > IDLE_TICKS) {
      clearInterval(this.#ticker)
      this.#ticker = undefined
    }
  }

  #take(bell: string): void {
    this.#run(async (connection) => {
      // Given up before its turn came (a lease released at once): nothing to take.
      if (this.#wanted.get(bell) !== false) return
      // Waiters hold the bell for an instant (they free it in the statement that took it): wait that out.
      const [rows] = await connection.query('SELECT GET_LOCK(?, 5) AS got', [bell])
      if ((rows as { got: number | null }[])[0]?.got === 1) {
        if (this.#wanted.has(bell)) this.#wanted.set(bell, true)
        else await connection.query('DO RELEASE_LOCK(?)', [bell])
      }
    })
  }

  /**
   * After a renewal: hold `bell`, taking it again when its connection was killed or lost meanwhile (the
   * server freed it then; nothing told us). One statement per renewal, on the bell connection.
   */
  ensure(bell: string): void {
    if (this.#wanted.get(bell) !== true) {
      this.ring(bell)
      return
    }
    this.#run(async (connection) => {
      if (this.#wanted.get(bell) !== true) return
      await connection.query('DO IF(IS_USED_LOCK(?) = CONNECTION_ID(), 1, GET_LOCK(?, 5))', [bell, bell])
    })
  }

  /** After a release, or a lease found lost: free `bell`, so the waiters wake. */
  silence(bell: string): void {
    const held = this.#wanted.get(bell)
    this.#wanted.delete(bell)
    // Not due yet: never rung (the timer, if it fires, finds nothing to do).
    this.#due.delete(bell)
    if (held !== true) return
    this.#run(async (connection) => {
      await connection.query('DO RELEASE_LOCK(?)', [bell])
    })
  }

  #run(step: (connection: PoolConnection) => Promise<void>): void {
    this.#queue = this.#queue.then(async () => {
      try {
        this.#connection ??= this.#pool.getConnection()
        await step(await this.#connection)
        if (this.#wanted.size === 0) this.#giveBack()
      } catch {
        // The connection is gone, and the bells it held with it (the server frees them): forget them, so
        // the next renewal takes them again. Waiters meanwhile wake at the lease's end or once a second.
        this.#drop()
      }
    })
  }

  /** Nothing held: the connection goes back to the pool (it holds no named lock). */
  #giveBack(): void {
    const connection = this.#connection
    this.#connection = undefined
    void connection?.then((c) => c.release()).catch(() => {})
  }

  #drop(): void {
    const connection = this.#connection
    this.#connection = undefined
    void connection?.then((c) => c.destroy()).catch(() => {})
    this.#wanted.clear()
  }

  /** Frees every bell (the connection is destroyed: the server frees what it held). */
  async close(): Promise<void> {
    clearInterval(this.#ticker)
    this.#ticker = undefined
    this.#due.clear()
    this.#wanted.clear()
    await this.#queue
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
        const [rows] = await connection.query(this.#sql, [bell, bell, bell, bell, long, key])
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
