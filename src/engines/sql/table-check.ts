/**
 * A client's check that its table (or tables) exist: made once, before the first statement that needs
 * them, shared by the attempts that arrive meanwhile, and made again after a statement failed (an
 * operator may have dropped them). With createTable the check creates what is missing; without, it fails
 * with the DDL to run. The lock and elections tables (engine.ts) and the semaphore tables (semaphore.ts)
 * are checked alike.
 */
import { raceSignal } from '../../core/abort.js'
import { withTimeout } from '../../core/clock.js'
import { BackendUnavailableError } from '../../core/errors.js'

/** The longest the check (and the creation) may take before the attempts waiting on it fail. */
const TABLE_CHECK_MS = 30_000

/** What the check asks of an adapter. */
export interface CheckedTables {
  /** The store, in messages. */
  readonly id: string
  /** The table's name (or the tables'), in messages. */
  readonly table: string
  tableExists(signal: AbortSignal): Promise<boolean>
  createTable(signal: AbortSignal): Promise<void>
  ddl(): string
}

/** How messages speak of the tables: "the lock table" is, "the semaphore tables" are. */
export interface TablesNamed {
  readonly noun: string
  readonly plural: boolean
}

export class TableCheck {
  readonly #adapter: CheckedTables
  readonly #createTable: boolean
  readonly #named: TablesNamed
  #ready: Promise<void> | undefined
  #checked = false

  constructor(adapter: CheckedTables, createTable: boolean, named: TablesNamed) {
    this.#adapter = adapter
    this.#createTable = createTable
    this.#named = named
  }

  /** Whether this client has seen the tables (then a statement may have left something in them). */
  get checked(): boolean {
    return this.#checked
  }

  /**
   * Makes sure the tables exist (creating them when allowed). The check runs on a signal of its own,
   * bounded, so that one caller giving up does not fail the others sharing it. Checked already: no
   * promise, no listener on the signal (the uncontended cycle's fast path).
   */
  ready(signal: AbortSignal): Promise<void> | undefined {
    if (this.#checked) return undefined
    if (this.#ready === undefined) {
      const ready = withTimeout(TABLE_CHECK_MS, (own) => this.#prepare(own))
      this.#ready = ready
      ready.then(
        () => {
          this.#checked = true
        },
        () => {
          if (this.#ready === ready) this.#ready = undefined
        },
      )
    }
    return raceSignal(this.#ready, signal)
  }

  /**
   * Whether the tables are there for a look (inspect, list, break). Never made here, even with
   * createTable: without them nobody holds anything (doctor names them and their DDL).
   */
  async there(signal: AbortSignal): Promise<boolean> {
    if (this.#checked) return true
    if (!(await this.#adapter.tableExists(signal))) return false
    this.#checked = true
    return true
  }

  /** A statement failed: the tables may be gone, and the next use checks them again (and makes them). */
  forget(): void {
    this.#checked = false
    this.#ready = undefined
  }

  async #prepare(signal: AbortSignal): Promise<void> {
    const adapter = this.#adapter
    if (await adapter.tableExists(signal)) return
    if (!this.#createTable) {
      const { noun, plural } = this.#named
      throw new BackendUnavailableError(
        `The ${noun} ${adapter.table} ${plural ? 'do' : 'does'} not exist on ${adapter.id}, and createTable is off. ` +
          `Create ${plural ? 'them' : 'it'} (e.g. in a migration) with:\n${adapter.ddl()}`,
        { backend: adapter.id, retryable: false },
      )
    }
    await adapter.createTable(signal)
  }
}
