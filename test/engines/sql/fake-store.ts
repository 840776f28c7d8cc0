/**
 * An in-memory `SqlAdapter` for the sql-lease engine's unit tests: one row per key on a "server clock"
 * (this process's monotonic clock, shiftable by `clockShiftMs`), the statements' semantics of
 * sql/adapter.ts, and one-shot faults a test queues for the next statement of a kind: applied then
 * the reply lost, failed before applying, held by a gate. Notifications are delivered to every listener
 * of the same fake server, and can be cut (`dropNotifications`) or refused (`listenFails`).
 */
import type {
  SqlAcquired,
  SqlAcquireRequest,
  SqlAdapter,
  SqlListedRow,
  SqlListener,
  SqlRow,
} from '../../../src/engines/sql/adapter.js'
import { BackendUnavailableError } from '../../../src/index.js'
import { sleep } from '../../support/time.js'

export type Statement = 'acquire' | 'extend' | 'release' | 'read' | 'list' | 'break'
export type Fault =
  | 'lose-reply'
  | 'throw-before'
  /** Held before it is applied. */
  | { readonly gate: Promise<void> }
  /** Applied at once, its reply held until the promise settles (a slow network on the way back). */
  | { readonly lateReply: Promise<void> }

interface StoredRow {
  owner: string
  fence: bigint
  expiresAt: number
  released: boolean
  holder: string | undefined
}

/** The server: rows, clock, listeners; each `FakeSqlDialect` is one client connected to it. */
export class FakeSqlServer {
  readonly rows = new Map<string, StoredRow>()
  readonly log: Array<{ statement: Statement; key: string; at: number }> = []
  clockShiftMs = 0
  tableExists = false
  tablesCreated = 0
  dropNotifications = false
  listenFails = false
  readonly listeners = new Set<{ onKey: (key: string) => void; onGap: () => void }>()

  now(): number {
    return performance.now() + this.clockShiftMs
  }

  count(statement: Statement, key?: string): number {
    return this.log.filter((l) => l.statement === statement && (key === undefined || l.key === key)).length
  }

  /** Ends `key`'s lease now (a premature expiry); the fence stays. */
  expire(key: string): void {
    const row = this.rows.get(key)
    if (row) row.expiresAt = this.now() - 1
  }

  /** Every listener's connection was lost and re-made: notifications in between may be missed. */
  gap(): void {
    for (const l of this.listeners) l.onGap()
  }

  notify(key: string): void {
    if (this.dropNotifications) return
    for (const l of this.listeners) queueMicrotask(() => l.onKey(key))
  }
}

export class FakeSqlDialect implements SqlAdapter {
  readonly id = 'fake-sql://test'
  readonly limits = { maxKeyBytes: 1024, maxTtlMs: 2 ** 31 }
  readonly table = '"public"."fencelock_locks"'
  readonly #faults: Array<{ statement: Statement; fault: Fault }> = []
  closed = false

  constructor(readonly server: FakeSqlServer) {}

  /** This client as an adapter without notifications (as MySQL/MariaDB). */
  withoutNotifications(): SqlAdapter {
    const { listen: _, ...rest } = Object.fromEntries(
      (
        [
          'acquire',
          'extend',
          'release',
          'read',
          'listHeld',
          'breakLease',
          'tableExists',
          'createTable',
          'ddl',
          'close',
        ] as const
      ).map((m) => [m, this[m].bind(this)]),
    ) as unknown as SqlAdapter
    return { ...rest, id: this.id, limits: this.limits, table: this.table }
  }

  /** Queues `fault` for the next `statement`. */
  next(statement: Statement, fault: Fault): this {
    this.#faults.push({ statement, fault })
    return this
  }

  async acquire(req: SqlAcquireRequest, signal: AbortSignal): Promise<SqlAcquired> {
    return this.#run('acquire', req.key, signal, () => {
      const s = this.server
      const row = s.rows.get(req.key)
      const t = s.now()
      if (row === undefined) {
        s.rows.set(req.key, {
          owner: req.owner,
          fence: 1n,
          expiresAt: t + req.ttlMs,
          released: false,
          holder: req.holder,
        })
        return { granted: true, fence: 1n, leaseMs: req.ttlMs }
      }
      const free = row.released || row.expiresAt <= t
      if (!free && row.owner !== req.owner) return { granted: false, current: toRow(row, t) }
      const fence = !free && row.owner === req.owner ? row.fence : row.fence + 1n
      Object.assign(row, {
        owner: req.owner,
        fence,
        expiresAt: t + req.ttlMs,
        released: false,
        holder: req.holder,
      })
      return { granted: true, fence, leaseMs: req.ttlMs }
    })
  }

  async extend(key: string, owner: string, fence: bigint, ttlMs: number, signal: AbortSignal) {
    return this.#run('extend', key, signal, () => {
      const row = this.server.rows.get(key)
      if (!row || row.owner !== owner || row.fence !== fence || row.released) return undefined
      row.expiresAt = this.server.now() + ttlMs
      return ttlMs
    })
  }

  async release(key: string, owner: string, fence: bigint | undefined, signal: AbortSignal) {
    return this.#run('release', key, signal, () => {
      const row = this.server.rows.get(key)
      if (!row || row.owner !== owner || (fence !== undefined && row.fence !== fence) || row.released)
        return false
      row.released = true
      row.expiresAt = 0
      this.server.notify(key)
      return true
    })
  }

  async read(key: string, signal: AbortSignal): Promise<SqlRow | undefined> {
    return this.#run('read', key, signal, () => {
      const row = this.server.rows.get(key)
      return row && toRow(row, this.server.now())
    })
  }

  async listHeld(prefix: string, after: string | undefined, limit: number, signal: AbortSignal) {
    return this.#run('list', prefix, signal, () => {
      const t = this.server.now()
      const bytes = (key: string) => Buffer.from(key)
      return [...this.server.rows]
        .filter(([key, row]) => key.startsWith(prefix) && !row.released && row.expiresAt > t)
        .filter(([key]) => after === undefined || Buffer.compare(bytes(key), bytes(after)) > 0)
        .sort(([a], [b]) => Buffer.compare(bytes(a), bytes(b)))
        .slice(0, limit)
        .map(([key, row]): SqlListedRow => ({ key, ...toRow(row, t) }))
    })
  }

  async breakLease(key: string, owner: string, fence: bigint, signal: AbortSignal) {
    return this.#run('break', key, signal, () => {
      const row = this.server.rows.get(key)
      if (!row || row.owner !== owner || row.fence !== fence || row.released) return false
      if (row.expiresAt <= this.server.now()) return false
      row.released = true
      row.expiresAt = 0
      this.server.notify(key)
      return true
    })
  }

  async tableExists(): Promise<boolean> {
    return this.server.tableExists
  }

  async createTable(): Promise<void> {
    this.server.tablesCreated++
    this.server.tableExists = true
  }

  ddl(): string {
    return `CREATE TABLE ${this.table} (…)`
  }

  async listen(onKey: (key: string) => void, onGap: () => void, signal: AbortSignal): Promise<SqlListener> {
    await sleep(1)
    if (this.server.listenFails) {
      // Like LISTEN behind a transaction-pooling proxy: subscribed, but nothing ever comes back.
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
      throw signal.reason
    }
    const listener = { onKey, onGap }
    this.server.listeners.add(listener)
    return {
      close: async () => {
        this.server.listeners.delete(listener)
      },
    }
  }

  async close(): Promise<void> {
    this.closed = true
  }

  async #run<T>(statement: Statement, key: string, signal: AbortSignal, apply: () => T): Promise<T> {
    signal.throwIfAborted()
    await sleep(0)
    const i = this.#faults.findIndex((f) => f.statement === statement)
    const fault = i >= 0 ? this.#faults.splice(i, 1)[0]!.fault : undefined
    const lost = () =>
      new BackendUnavailableError(`connection reset during ${statement}`, {
        key,
        backend: this.id,
        retryable: true,
      })
    if (fault === 'throw-before') throw lost()
    if (typeof fault === 'object' && 'gate' in fault) await fault.gate
    this.server.log.push({ statement, key, at: performance.now() })
    const out = apply()
    if (fault === 'lose-reply') throw lost()
    if (typeof fault === 'object' && 'lateReply' in fault) await fault.lateReply
    return out
  }
}

function toRow(row: StoredRow, t: number): SqlRow {
  return {
    owner: row.owner,
    fence: row.fence,
    remainingMs: row.released ? -1 : row.expiresAt - t,
    released: row.released,
    holder: row.holder,
  }
}
