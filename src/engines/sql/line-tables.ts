/**
 * What the sql engine's semaphore (semaphore.ts) and read-write lock (rwlock.ts) share, each over a pair
 * of tables of its own beside the lock table where a line of grants and places is kept: the tables check,
 * the waiting (notifications, else polling), the pace of housekeeping, the owners whose acquire sent a
 * transaction (abandon is keyed on them), doctor's finding on the tables, and close.
 */
import { raceSignal } from '../../core/abort.js'
import type { DoctorFinding } from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import type { SqlListener } from './adapter.js'
import type { SqlLeaseOptions } from './engine.js'
import { RetirePacer } from './retire-pacer.js'
import { type CheckedTables, TableCheck } from './table-check.js'
import { SqlWaiting } from './wait.js'

const POLL_MAX_MS = 1000
const LISTEN_TIMEOUT_MS = 5000
const RETIRE_EVERY_MS = 10_000
/** The most names one housekeeping transaction retires. */
export const RETIRE_BATCH = 100
const RETIRE_STATEMENT_MS = 10_000
/** Owners whose acquire sent a transaction (for abandon); forgetting one leaves its rows to their lease's end. */
const OWNERS_KEPT = 10_000

/** What the shared parts ask of a primitive's adapter. */
export interface LineAdapter extends CheckedTables {
  /** Notifications, where the store has them (see `SqlWaiting`). */
  listen?(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener>
  close(): Promise<void>
}

export class LineTables {
  readonly #adapter: LineAdapter
  readonly #createTable: boolean
  /** "semaphore" or "read-write lock": in doctor's words. */
  readonly #what: string
  readonly waiting: SqlWaiting
  /** The tables check of this client: made once, before the first transaction (again after a failure). */
  readonly tables: TableCheck
  readonly #retirePacer = new RetirePacer(RETIRE_EVERY_MS, RETIRE_BATCH, RETIRE_STATEMENT_MS)
  /** Owners whose acquire sent a transaction, which may have committed whatever we heard (abandon). */
  readonly sent = new BoundedMap<string, true>(OWNERS_KEPT)

  constructor(adapter: LineAdapter, options: SqlLeaseOptions, what: string) {
    this.#adapter = adapter
    this.#createTable = options.createTable ?? true
    this.#what = what
    this.tables = new TableCheck(adapter, this.#createTable, { noun: `${what} tables`, plural: true })
    this.waiting = new SqlWaiting(
      adapter,
      options.pollMaxMs ?? POLL_MAX_MS,
      options.listenTimeoutMs ?? LISTEN_TIMEOUT_MS,
    )
  }

  /** Runs `retire` (one transaction retiring up to `RETIRE_BATCH` idle names) unless the pace says wait. */
  retire(retire: () => Promise<number>): void {
    this.#retirePacer.retire((signal) => raceSignal(retire(), signal))
  }

  /** `doctor`'s finding on the tables: there, or made on first use (or not: createTable off). */
  async doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    const { table } = this.#adapter
    const what = this.#what
    if (await this.#adapter.tableExists(signal)) {
      return [{ level: 'ok', message: `the ${what} tables ${table} exist` }]
    }
    const ddl = this.#adapter.ddl()
    return [
      {
        level: this.#createTable ? 'info' : 'warn',
        message: this.#createTable
          ? `the ${what} tables ${table} do not exist yet; the first ${what} creates them with:\n${ddl}`
          : `the ${what} tables ${table} do not exist and createTable is off: no ${what} can be used until they are made with:\n${ddl}`,
      },
    ]
  }

  async close(): Promise<void> {
    try {
      await this.waiting.close()
    } finally {
      await this.#adapter.close()
    }
  }
}
