/**
 * Waking waiters without notifications: a doorbell per lock, a named lock of `GET_LOCK`.
 *
 * - The holder rings: while it holds a lease it keeps the lock's doorbell (`GET_LOCK(bell)`) on ONE
 *   connection per client (`Bells`), taken after a grant and freed after its release. The grant and the
 *   release never wait for it: it runs on its own connection, in order, behind them.
 * - A waiter blocks in one statement (statements.ts, `watchSql`) until the bell is freed or the holder's
 *   lease ends, on a connection of its own; the waiters of one key in one process share that one wait.
 * - The bell is a hint, never a grant: after it rings the waiter attempts the lease row, which alone
 *   decides. A holder whose doorbell connection was lost (or whose process is paused) cannot keep waiters
 *   asleep past its lease: the wait's timeout is the lease the server has left; a bell missing while the
 *   row is held degrades to one statement per second. A lost bell is taken again at the next renewal.
 */
import type { Pool, PoolConnection } from 'mysql2/promise'

/** The holder's side: the doorbells of the leases this client holds, on one connection of the pool. */
export class Bells {
  readonly #pool: Pool
  /** Bells we want held, and whether the connection holds each yet. */
  readonly #wanted = new Map<string, boolean>()
  #connection: Promise<PoolConnection> | undefined
  /** Every bell statement runs after the previous one: a take and its release never cross. */
  #queue: Promise<void> = Promise.resolve()

  constructor(pool: Pool) {
    this.#pool = pool
  }

  /** After a grant or a renewal: hold `bell` (again, if the connection holding it was lost). */
  ring(bell: string): void {
    if (this.#wanted.has(bell)) return
    this.#wanted.set(bell, false)
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
        await connection.query(this.#sql, [bell, bell, bell, bell, key])
        connection.release()
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
