/**
 * The MySQL/MariaDB adapter of the sql-lease engine: the statements of statements.ts over the user's
 * mysql2 pool (promise API), the doorbell of doorbell.ts, and errors in words. A little over 300 lines:
 * which owners of this client hold which key (and so its bell) is kept beside the statements that take
 * and free the bells.
 */
import type { Pool, ResultSetHeader, RowDataPacket } from 'mysql2/promise'
import type { BackendLimits, DoctorFinding } from '../../core/backend.js'
import { BackendUnavailableError } from '../../core/errors.js'
import type {
  SqlAcquired,
  SqlAcquiredAll,
  SqlAcquireRequest,
  SqlAdapter,
  SqlListedRow,
  SqlRow,
} from '../../engines/sql/adapter.js'
import { HeldByAnother } from '../../engines/sql/held-by-another.js'
import { countFinding, deleteFinding, mysqlDoctor, valueColumnFinding } from './doctor.js'
import { type BellEffect, type BellUse, DoorbellWaits, LeaseConnections } from './doorbell.js'
import { describeFailure, poolConnectionLimit, type SqlParam } from './faults.js'
import { doorbellName, MAX_KEY_BYTES, tableDdl } from './layout.js'
import {
  acquireSql,
  breakSql,
  columnExistsSql,
  extendSql,
  freeBellSql,
  leaseLeftSql,
  listSql,
  proclaimSql,
  readSql,
  releaseSql,
  retireDueSql,
  retireSql,
  tableExistsSql,
} from './statements.js'
import { inTransaction } from './transaction.js'

/** Keys up to the key column's 3072 bytes; leases up to 2^31 ms (24.8 days: Node's timers). */
export const MYSQL_LIMITS: BackendLimits = { maxKeyBytes: MAX_KEY_BYTES, maxTtlMs: 2 ** 31 - 1 }

/** A row of `readSql` or `listSql`. */
function toRow(row: RowDataPacket): SqlRow {
  const released = Number(row.released) === 1
  return {
    owner: String(row.owner),
    fence: BigInt(row.fence as string),
    remainingMs: released ? -1 : Math.floor(Number(row.remaining_us) / 1000),
    released,
    holder: row.holder === null ? undefined : String(row.holder),
    // An elections table's value: binary, its bytes the value's UTF-8 (like the key).
    ...(row.value === undefined ? {} : { value: Buffer.from(row.value as Buffer).toString('utf8') }),
  }
}

/** "Rows matched: N" of an UPDATE's reply: counts matched rows whatever CLIENT_FOUND_ROWS says. */
export function matched(result: ResultSetHeader): number {
  const found = /Rows matched:\s*(\d+)/.exec(result.info ?? '')
  return found ? Number(found[1]) : result.affectedRows
}

export interface MySqlDialectOptions {
  readonly pool: Pool
  /** The table, quoted (`\`db\`.\`locks\``). */
  readonly table: string
  /** The table's name and database as information_schema spells them. */
  readonly tableName: string
  readonly database?: string | undefined
  /** The database the table lives in (named, or the pool's), which the doorbells' names include. */
  readonly bellDatabase: string
  readonly id: string
  /** The pool was made from a URL: close ends it. */
  readonly owned: boolean
  /** Wake waiters with the GET_LOCK doorbell (doorbell.ts); off, waiters poll (the engine's pace). */
  readonly doorbell: boolean
  /** `table` is an elections table (src/engines/sql-election.ts): its rows carry the leader's value. */
  readonly election?: boolean | undefined
}

/** The sql-lease engine's adapter for MySQL/MariaDB (`mysqlBackend` builds one) over your mysql2 pool. */
export class MySqlAdapter implements SqlAdapter {
  readonly id: string
  readonly limits = MYSQL_LIMITS
  readonly table: string
  readonly #options: MySqlDialectOptions
  readonly #pool: Pool
  readonly #sql: {
    /** With the bell's take and release, and without (for a key this client holds already). */
    acquire: string
    acquireHolding: string
    extend: string
    release: string
    abandon: string
    read: string
    leaseLeft: string
    breakLease: string
    proclaim: string
  }
  /** Where acquire, extend and release run: connections of their own (holding the bells), or the pool. */
  readonly #lease: LeaseConnections | undefined
  readonly #waits: DoorbellWaits | undefined
  /**
   * The owners this client holds each key for (granted, not yet released or found lost): while there is
   * one, the bell of that key is this client's, and no statement of another owner takes or frees it.
   */
  readonly #holding = new Map<string, Set<string>>()
  /** The doorbell wait (absent with the doorbell off: the engine then polls). */
  readonly watch?: (key: string, signal: AbortSignal) => Promise<void>
  #closed: Promise<void> | undefined

  constructor(options: MySqlDialectOptions) {
    this.#options = options
    this.#pool = options.pool
    this.id = options.id
    this.table = options.table
    const t = options.table
    const bell = options.doorbell
    const election = options.election ?? false
    this.#sql = {
      acquire: acquireSql(t, bell, election),
      acquireHolding: acquireSql(t, false, election),
      extend: extendSql(t, bell),
      release: releaseSql(t, true, bell),
      abandon: releaseSql(t, false, bell),
      read: readSql(t, election),
      leaseLeft: leaseLeftSql(t),
      breakLease: breakSql(t),
      proclaim: proclaimSql(t),
    }
    if (bell) {
      // Of the pool's connections, a third (1 to 4) for lease statements and half of the rest for doorbell
      // waits: neither can take all the others need (a renewal never waits for a free connection behind
      // waits, and reads always find one).
      const limit = poolConnectionLimit(this.#pool)
      const lanes = Math.max(1, Math.min(4, Math.floor(limit / 3)))
      const waits = new DoorbellWaits(this.#pool, this.#sql, Math.floor((limit - lanes) / 2))
      this.#lease = new LeaseConnections(this.#pool, lanes)
      this.#waits = waits
      this.watch = (key, signal) => waits.wait(key, this.#bell(key), signal)
    }
  }

  #bell(key: string): string {
    return doorbellName(this.#options.bellDatabase, this.table, key)
  }

  /**
   * Runs a statement on the pool, or (`lease`) on the lease connections when there are any. The lease
   * statements and reads are prepared once per connection (`execute`): parsing them each time took
   * about a third of their time (measured: 0.08 ms against 0.05 ms on MariaDB 10.11).
   */
  async #run<T>(
    key: string | undefined,
    sql: string,
    params: SqlParam[],
    how: 'lease' | 'prepared' | 'plain' = 'plain',
    signal?: AbortSignal,
    bell?: BellUse,
  ): Promise<T> {
    try {
      if (how === 'lease' && this.#lease) return (await this.#lease.execute(sql, params, signal, bell)) as T
      const [result] =
        how === 'plain' ? await this.#pool.query(sql, params) : await this.#pool.execute(sql, params)
      return result as T
    } catch (cause) {
      const { text, retryable } = describeFailure(cause)
      throw new BackendUnavailableError(
        `${this.id} failed${key === undefined ? '' : ` for "${key}"`}: ${text}`,
        { key, backend: this.id, cause, retryable },
      )
    }
  }

  async acquire(req: SqlAcquireRequest, signal: AbortSignal): Promise<SqlAcquired> {
    const { key, owner, ttlMs } = req
    // A key this client holds already has its bell on one of our connections: this statement leaves it alone.
    const holding = (this.#holding.get(key)?.size ?? 0) > 0
    const bell = this.#lease && !holding ? [this.#bell(key)] : []
    const result = await this.#run<ResultSetHeader>(
      key,
      holding ? this.#sql.acquireHolding : this.#sql.acquire,
      this.#acquireParams(req, bell),
      'lease',
      signal,
      this.#bellUse(key, holding ? () => undefined : (r) => (r.affectedRows > 0 ? 'took' : undefined)),
    )
    // 1: inserted, 2: taken over or ours renewed (the fence in the OK packet); 0: held.
    if (result.affectedRows === 0) {
      return { granted: false, remainingMs: Number(result.insertId) }
    }
    this.#hold(key, owner)
    const fence = await this.#fence(req, result.insertId)
    return { granted: true, fence, leaseMs: ttlMs }
  }

  /** The acquire statement's params (statements.ts, `acquireSql`); `bell`: the bell's name, or none. */
  #acquireParams(req: SqlAcquireRequest, bell: string[]): SqlParam[] {
    const { key, owner, ttlMs } = req
    const holder = req.holder ?? null
    // An elections table's value: after the insert's holder, and (owner, value) after the update's.
    const value = this.#options.election ? [req.value ?? ''] : []
    const ours = this.#options.election ? [owner, req.value ?? ''] : []
    return [
      ...[key, owner, ttlMs, ...bell, ...bell, holder, ...value, owner, ...bell, holder, ...ours],
      ...[owner, owner, ttlMs],
    ]
  }

  /**
   * Every key's acquire statement in ONE transaction (transaction.ts: READ COMMITTED, read-write) on a
   * connection of the pool, in the order given: each statement keeps its key's row locked to the end, so
   * two sets lock their common keys in one order. The first key held by another rolls it all back; a
   * deadlock or a lock wait timeout rolled it back too: a refusal, tried again. The doorbells are left
   * out (a named lock outlives a rollback): each key's first renewal takes its bell, and until then its
   * waiters ask about every two seconds (doorbell.ts: a bell missing while the row is held).
   */
  async acquireAll(reqs: readonly SqlAcquireRequest[], _signal: AbortSignal): Promise<SqlAcquiredAll> {
    let out: { key: string; insertId: number | string }[]
    try {
      out = await inTransaction(
        this.#pool,
        async (run) => {
          const granted: { key: string; insertId: number | string }[] = []
          for (const req of reqs) {
            const result = (await run(
              this.#sql.acquireHolding,
              this.#acquireParams(req, []),
            )) as ResultSetHeader
            // 0: held by another (its lease left in the OK packet): nothing of the set is kept.
            if (result.affectedRows === 0) throw new HeldByAnother(req.key, Number(result.insertId))
            granted.push({ key: req.key, insertId: result.insertId })
          }
          return granted
        },
        true,
      )
    } catch (cause) {
      if (cause instanceof HeldByAnother)
        return { granted: false, key: cause.key, remainingMs: cause.remainingMs }
      const code = (cause as { code?: unknown }).code
      if (code === 'ER_LOCK_DEADLOCK' || code === 'ER_LOCK_WAIT_TIMEOUT') return { granted: false }
      const { text, retryable } = describeFailure(cause)
      const key = reqs[0]?.key
      throw new BackendUnavailableError(`${this.id} failed for "${key}": ${text}`, {
        key,
        backend: this.id,
        cause,
        retryable,
      })
    }
    const grants = []
    for (const [i, req] of reqs.entries()) {
      this.#hold(req.key, req.owner)
      // After the commit: a fence past 2^53 is read back from the row, ours by then.
      grants.push({ fence: await this.#fence(req, out[i]!.insertId), leaseMs: req.ttlMs })
    }
    return { granted: true, grants }
  }

  #hold(key: string, owner: string): void {
    let owners = this.#holding.get(key)
    if (owners === undefined) {
      owners = new Set()
      this.#holding.set(key, owners)
    }
    owners.add(owner)
  }

  /** `owner` no longer holds `key`: true when nobody of this client does (its bell may be freed). */
  #unhold(key: string, owner: string): boolean {
    const owners = this.#holding.get(key)
    owners?.delete(owner)
    if (owners !== undefined && owners.size > 0) return false
    this.#holding.delete(key)
    return true
  }

  /** Frees the bell of `key` after a statement that found the row not ours (if this client holds none). */
  async #freeBell(key: string, owner: string): Promise<void> {
    if (this.#unhold(key, owner) && this.#lease) {
      const use = this.#bellUse(key, () => 'freed')
      await this.#run(key, freeBellSql, [this.#bell(key)], 'lease', undefined, use).catch(() => {})
    }
  }

  /** The bell of `key` for the lease connections: where to run its statement, and what it did to the bell. */
  #bellUse(key: string, effect: (result: ResultSetHeader) => BellEffect): BellUse {
    return { bell: this.#bell(key), effect: (result) => effect(result as ResultSetHeader) }
  }

  /**
   * The fence of a grant from the OK packet, exact when the pool returns big numbers as strings; past
   * 2^53 without them the number is rounded, so read it from the row (ours: we were just granted).
   */
  async #fence(req: SqlAcquireRequest, insertId: number | string): Promise<bigint> {
    if (typeof insertId === 'string') return BigInt(insertId)
    if (Number.isSafeInteger(insertId)) return BigInt(insertId)
    const row = await this.read(req.key, new AbortController().signal)
    if (row?.owner !== req.owner) {
      throw new BackendUnavailableError(`${this.id}: the fence of "${req.key}" could not be read back`, {
        key: req.key,
        backend: this.id,
      })
    }
    return row.fence
  }

  async extend(
    key: string,
    owner: string,
    fence: bigint,
    ttlMs: number,
    signal?: AbortSignal,
  ): Promise<number | undefined> {
    // With the doorbell, the statement takes the bell again if our connection lost it (a reconnect).
    const bell = this.#lease ? [this.#bell(key), this.#bell(key)] : []
    const result = await this.#run<ResultSetHeader>(
      key,
      this.#sql.extend,
      [ttlMs, ...bell, key, owner, String(fence)],
      'lease',
      signal,
      this.#bellUse(key, (r) => (matched(r) > 0 ? 'took' : undefined)),
    )
    if (matched(result) === 0) {
      await this.#freeBell(key, owner)
      return undefined
    }
    return ttlMs
  }

  async release(
    key: string,
    owner: string,
    fence: bigint | undefined,
    signal?: AbortSignal,
  ): Promise<boolean> {
    // Another owner of this client still holding the key keeps the bell: release without it.
    const others = [...(this.#holding.get(key) ?? [])].some((o) => o !== owner)
    const sql = others
      ? releaseSql(this.table, fence !== undefined, false)
      : fence === undefined
        ? this.#sql.abandon
        : this.#sql.release
    const bell = this.#lease && !others ? [this.#bell(key)] : []
    const fenced = fence === undefined ? [] : [String(fence)]
    let result: ResultSetHeader
    try {
      const use = this.#bellUse(key, () => (others ? undefined : 'freed'))
      result = await this.#run<ResultSetHeader>(
        key,
        sql,
        [...bell, key, owner, ...fenced],
        'lease',
        signal,
        use,
      )
    } catch (error) {
      // Whatever it did, this owner is done with the key (the engine settles the outcome, and repeats the
      // release if the row is still ours): marked as holding, it would keep this client's later grants of
      // the key from taking its bell, and their waiters would never be rung.
      await this.#freeBell(key, owner)
      throw error
    }
    if (matched(result) > 0) {
      this.#unhold(key, owner)
      return true
    }
    await this.#freeBell(key, owner)
    return false
  }

  /** An elections table's proclaim (statements.ts, `proclaimSql`); a lock table has no value to replace. */
  async proclaim(key: string, owner: string, fence: bigint, value: string, signal?: AbortSignal) {
    if (!this.#options.election)
      throw new TypeError(`${this.table} is a lock table: it holds no election values`)
    const result = await this.#run<ResultSetHeader>(
      key,
      this.#sql.proclaim,
      [value, key, owner, String(fence)],
      'lease',
      signal,
    )
    return matched(result) > 0
  }

  async read(key: string, _signal: AbortSignal): Promise<SqlRow | undefined> {
    const rows = await this.#run<RowDataPacket[]>(key, this.#sql.read, [key], 'prepared')
    return rows[0] === undefined ? undefined : toRow(rows[0])
  }

  async listHeld(
    prefix: string,
    after: string | undefined,
    limit: number,
    _signal: AbortSignal,
  ): Promise<SqlListedRow[]> {
    const params = [prefix, Buffer.byteLength(prefix), prefix, ...(after === undefined ? [] : [after])]
    const rows = await this.#run<RowDataPacket[]>(
      undefined,
      listSql(this.table, after !== undefined, limit),
      params,
      'prepared',
    )
    // The key column is binary: its bytes are the key's UTF-8.
    return rows.map((row) => ({ key: Buffer.from(row.lock_key as Buffer).toString('utf8'), ...toRow(row) }))
  }

  /**
   * The break statement; the bell freed when the broken lease was this client's. Another client's bell
   * stays with its lease connection, which alone can free it (see `breakSql`): ending that connection
   * would fail whatever else runs on it, and it may be a connection of the application's own pool.
   */
  async breakLease(key: string, owner: string, fence: bigint, signal: AbortSignal): Promise<boolean> {
    const result = await this.#run<ResultSetHeader>(
      key,
      this.#sql.breakLease,
      [key, owner, String(fence)],
      'lease',
      signal,
    )
    if (matched(result) === 0) return false
    if (this.#holding.get(key)?.has(owner)) await this.#freeBell(key, owner)
    return true
  }

  /** Retires rows ended long ago (statements.ts, `retireDueSql`): a read, then a delete checked again. */
  async retire(endedMs: number, limit: number, _signal: AbortSignal): Promise<number> {
    const due = await this.#run<RowDataPacket[]>(undefined, retireDueSql(this.table, limit), [endedMs])
    if (due.length === 0) return 0
    // The keys as the strings they were made from (the column holds their UTF-8, as in listHeld).
    const keys = due.map((row) => Buffer.from(row.lock_key as Buffer).toString('utf8'))
    const result = await this.#run<ResultSetHeader>(undefined, retireSql(this.table, keys.length), [
      endedMs,
      ...keys,
    ])
    return result.affectedRows
  }

  async tableExists(_signal: AbortSignal): Promise<boolean> {
    const rows = await this.#run<RowDataPacket[]>(
      undefined,
      tableExistsSql,
      [this.#options.database ?? null, this.#options.tableName],
      'prepared',
    )
    return Number(rows[0]?.n) > 0
  }

  async createTable(_signal: AbortSignal): Promise<void> {
    // CREATE TABLE IF NOT EXISTS: a concurrent creator's table is as good as ours.
    await this.#run(undefined, this.ddl(), [])
  }

  ddl(): string {
    return tableDdl(this.table, this.#options.election)
  }

  doctor(_signal: AbortSignal): Promise<DoctorFinding[]> {
    return mysqlDoctor(this.#query)
  }

  async tableDoctor(_signal: AbortSignal): Promise<DoctorFinding[]> {
    const { election } = this.#options
    const findings = [
      await countFinding(this.#query, this.table, election),
      await deleteFinding(this.#query, this.table),
    ]
    if (election) {
      const rows = await this.#run<RowDataPacket[]>(
        undefined,
        columnExistsSql,
        [this.#options.database ?? null, this.#options.tableName, 'value'],
        'prepared',
      )
      findings.push(valueColumnFinding(this.table, Number(rows[0]?.n) > 0, this.ddl()))
    }
    return findings
  }

  /** A plain query of doctor's, on the pool. */
  readonly #query = (sql: string) => this.#run<RowDataPacket[]>(undefined, sql, [])

  /** Idempotent: the client and its caller may both close (ending a pool twice throws). */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#waits?.close()
      await this.#lease?.close()
      if (this.#options.owned) await this.#pool.end()
    })()
    return this.#closed
  }
}
