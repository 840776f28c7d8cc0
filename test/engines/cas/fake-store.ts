/**
 * An in-memory `CasAdapter` for the cas-lease engine's unit tests: one versioned record per key, answered
 * asynchronously like a store, with one-shot faults a test queues for the next operation of a kind:
 * a reply lost after the write was applied, a failure before it was applied, a refusal (also one after
 * applying, as an SDK's own retry reports it), 429/503 errors, a gate that holds the operation, a
 * write held at the store while its caller gives up (applied later, as a request already sent is), and a
 * "lax" mode that ignores every condition (some S3-compatible servers do). Every operation is logged
 * with when it reached the store and when it was applied, on the test's monotonic clock. `list` pages
 * every record in key order, whatever the prefix (as a store that filters only after reading).
 */

import type { CasAdapter, CasListed, CasVersioned, CasWrite } from '../../../src/engines/cas/adapter.js'
import { noteClock, type ServerClock } from '../../../src/engines/cas/fence.js'
import { BackendUnavailableError } from '../../../src/index.js'
import { sleep } from '../../support/time.js'

export type Op = 'read' | 'create' | 'replace' | 'delete'

export type Fault =
  /** Applied, then the reply is lost (the adapter throws a retryable error). */
  | 'lose-reply'
  /** Fails before anything is applied. */
  | 'throw-before'
  /** Refused without being applied, whatever the condition. */
  | 'refuse'
  /** Applied, then reported refused: an SDK retry of a write whose first attempt won. */
  | 'apply-then-refuse'
  /** Throttled / unavailable, nothing applied. */
  | 429
  | 503
  /** Held until the promise settles, then done normally. */
  | { readonly gate: Promise<void> }
  /**
   * A write held at the store until the promise settles, then done normally (applied if its condition
   * still holds), while its caller is rejected at once when its signal aborts: an SDK call rejects on
   * abort, but the request it already sent is still committed by the server, after anything the caller
   * does next.
   */
  | { readonly late: Promise<void> }

export interface LoggedOp {
  readonly op: Op
  readonly key: string
  /** When the request reached the store. */
  readonly at: number
  /** When it was applied (writes that changed the record; reads: when served). */
  applied?: number
  /** The record's version after the operation (writes that landed). */
  version?: string
  /** When the store was done with it (applied or refused), whether or not its caller still listened. */
  done?: number
}

export class FakeCasStore implements CasAdapter {
  readonly id: string
  readonly limits = { maxKeyBytes: 1024, maxTtlMs: 2 ** 31 }
  minWriteIntervalMs = 0
  readonly records = new Map<string, CasVersioned>()
  readonly log: LoggedOp[] = []
  /** Every answer takes this long (the operation is applied at the end, whether or not anyone still waits). */
  delayMs = 0
  /** Ignore `If-None-Match` / `If-Match`: every write is applied. */
  lax = false
  /** Refusals carry the current record (DynamoDB's ALL_OLD). */
  returnCurrent = false
  /**
   * The server's clock each answer shows (its `Date`), in seconds, by operation; undefined: the store
   * shows none (then fences are the record's counter alone).
   */
  clock: (op: Op) => number | undefined = () => undefined
  closed = false
  /** Whether it has a conditional delete (`view()` leaves it out otherwise; call `delete` directly anyway). */
  deletes = true
  /** Records per page of `list`; `pages` counts the pages listed. */
  pageSize = 3
  pages = 0
  readonly #faults: Array<{ readonly op: Op | 'write'; readonly fault: Fault; skip: number }> = []
  #versions = 0

  constructor(id = 'fake-cas://test') {
    this.id = id
  }

  /**
   * A server clock from second `base` that moves one second per second of the test's monotonic clock,
   * as a store's does; `jump(s)` moves it `s` seconds forward at once.
   */
  ticking(base: number): { jump(seconds: number): void } {
    const start = performance.now()
    let jumped = 0
    this.clock = () => base + jumped + Math.floor((performance.now() - start) / 1000)
    return {
      jump: (seconds) => {
        jumped += seconds
      },
    }
  }

  /** Queues `fault` for the next operation `op` ('write': a create or a replace), after `skip` of them. */
  next(op: Op | 'write', fault: Fault, skip = 0): this {
    this.#faults.push({ op, fault, skip })
    return this
  }

  /**
   * A process's own connection to the store: `crash()` makes every later call of it hang until its
   * signal aborts, as a process that died (or was cut off) sends nothing more. `cacheReads(true)` puts a
   * caching proxy in front of its reads (a store without read-after-write consistency): each key's
   * reads answer what the first read after that answered, until `cacheReads(false)`; writes go through.
   */
  view(): CasAdapter & { crash(): void; cacheReads(on: boolean): void } {
    const store = this
    let crashed = false
    let cache: Map<string, Promise<CasVersioned | undefined>> | undefined
    const read = (key: string, signal: AbortSignal, clock?: ServerClock) => {
      if (cache === undefined) return this.read(key, signal, clock)
      const cached = cache.get(key) ?? this.read(key, signal, clock)
      cache.set(key, cached)
      return cached
    }
    const dead = (signal: AbortSignal) =>
      new Promise<never>((_, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true })
      })
    return {
      id: this.id,
      limits: this.limits,
      get minWriteIntervalMs() {
        return store.minWriteIntervalMs
      },
      read: (key, signal, clock) => (crashed ? dead(signal) : read(key, signal, clock)),
      list: (prefix, signal) => this.list(prefix, signal),
      create: (key, body, signal, clock) => (crashed ? dead(signal) : this.create(key, body, signal, clock)),
      replace: (key, body, version, signal, clock) =>
        crashed ? dead(signal) : this.replace(key, body, version, signal, clock),
      ...(this.deletes
        ? {
            delete: (key: string, version: string, signal: AbortSignal, clock?: ServerClock) =>
              crashed ? dead(signal) : this.delete(key, version, signal, clock),
          }
        : {}),
      close: async () => {},
      crash: () => {
        crashed = true
      },
      cacheReads: (on) => {
        cache = on ? new Map() : undefined
      },
    }
  }

  /** Puts a record as another program (or a crashed holder) left it. */
  put(key: string, body: string): string {
    const version = `v${++this.#versions}`
    this.records.set(key, { body, version })
    return version
  }

  /** The record of `key`, decoded. */
  json(key: string): Record<string, unknown> | undefined {
    const r = this.records.get(key)
    return r && (JSON.parse(r.body) as Record<string, unknown>)
  }

  count(op: Op | 'write', key?: string): number {
    return this.log.filter((l) => matches(op, l.op) && (key === undefined || l.key === key)).length
  }

  async read(key: string, signal: AbortSignal, clock?: ServerClock): Promise<CasVersioned | undefined> {
    const entry = this.#enter('read', key)
    await this.#before(entry, this.#take(entry), signal)
    entry.applied = performance.now()
    noteClock(clock, this.clock('read'))
    return this.records.get(key)
  }

  /** Every record, a page at a time: the engine filters by prefix. */
  async *list(_prefix: string, signal: AbortSignal): AsyncGenerator<CasListed> {
    const keys = [...this.records.keys()].sort()
    for (let i = 0; i < keys.length; i += this.pageSize) {
      signal.throwIfAborted()
      this.pages++
      await new Promise<void>((resolve) => setImmediate(resolve))
      for (const key of keys.slice(i, i + this.pageSize)) {
        const current = this.records.get(key)
        if (current) yield { key, current }
      }
    }
  }

  create(key: string, body: string, signal: AbortSignal, clock?: ServerClock): Promise<CasWrite> {
    return this.#write('create', key, body, undefined, signal, clock)
  }

  replace(
    key: string,
    body: string,
    version: string,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasWrite> {
    return this.#write('replace', key, body, version, signal, clock)
  }

  /**
   * Deletes the record of `key` if it is at `version` (a conditional delete): true when gone (also when
   * there was none, as S3 may answer), false when another version is there. A store made with
   * `deletes = false` has no delete (`view()` and `driver()` leave it out).
   */
  delete(key: string, version: string, signal: AbortSignal, clock?: ServerClock): Promise<boolean> {
    const entry = this.#enter('delete', key)
    const fault = this.#take(entry)
    const done = (async () => {
      try {
        await this.#before(entry, fault, signal)
        const current = this.records.get(key)
        if (fault === 'refuse' || (current !== undefined && current.version !== version && !this.lax))
          return false
        this.records.delete(key)
        entry.applied = performance.now()
        if (fault === 'lose-reply') throw unavailable(key, 'the reply was lost')
        return true
      } finally {
        entry.done = performance.now()
      }
    })()
    done.then(() => noteClock(clock, this.clock('delete'))).catch(() => {})
    return done
  }

  async close(): Promise<void> {
    this.closed = true
  }

  async #write(
    op: 'create' | 'replace',
    key: string,
    body: string,
    version: string | undefined,
    signal: AbortSignal,
    clock: ServerClock | undefined,
  ): Promise<CasWrite> {
    const entry = this.#enter(op, key)
    const fault = this.#take(entry)
    const done = this.#apply(entry, fault, body, version, signal)
    done.then(() => noteClock(clock, this.clock(op))).catch(() => {})
    if (typeof fault !== 'object' || !('late' in fault)) return done
    // The caller stops listening on abort; the store still applies the write when its hold ends.
    done.catch(() => {})
    return new Promise<CasWrite>((resolve, reject) => {
      const abort = () => reject(signal.reason)
      if (signal.aborted) abort()
      signal.addEventListener('abort', abort, { once: true })
      done.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort))
    })
  }

  /** A write as the store does it: after its delay and fault, applied if its condition holds. */
  async #apply(
    entry: LoggedOp,
    fault: Fault | undefined,
    body: string,
    version: string | undefined,
    signal: AbortSignal,
  ): Promise<CasWrite> {
    try {
      await this.#before(entry, fault, signal)
      return this.#commit(entry, fault, body, version)
    } finally {
      entry.done = performance.now()
    }
  }

  #commit(entry: LoggedOp, fault: Fault | undefined, body: string, version: string | undefined): CasWrite {
    const { op, key } = entry
    const current = this.records.get(key)
    const holds = op === 'create' ? current === undefined : current?.version === version
    if (fault === 'refuse' || (!holds && !this.lax)) {
      return { ok: false, ...(this.returnCurrent && current ? { current } : {}) }
    }
    entry.version = this.put(key, body)
    entry.applied = performance.now()
    if (fault === 'lose-reply') throw unavailable(key, 'the reply was lost')
    if (fault === 'apply-then-refuse') {
      return { ok: false, ...(this.returnCurrent ? { current: this.records.get(key) } : {}) }
    }
    return { ok: true, version: entry.version }
  }

  #enter(op: Op, key: string): LoggedOp {
    const entry: LoggedOp = { op, key, at: performance.now() }
    this.log.push(entry)
    return entry
  }

  /** The queued fault of an operation, taken as it reaches the store. */
  #take(entry: LoggedOp): Fault | undefined {
    const i = this.#faults.findIndex((f) => matches(f.op, entry.op))
    const queued = this.#faults[i]
    if (queued && queued.skip > 0) queued.skip--
    else if (queued) return this.#faults.splice(i, 1)[0]!.fault
    return undefined
  }

  /** The delay and the fault of an operation; throws for the faults that apply nothing. */
  async #before(entry: LoggedOp, fault: Fault | undefined, signal: AbortSignal): Promise<void> {
    if (this.delayMs > 0) await sleep(this.delayMs)
    else await new Promise<void>((resolve) => setImmediate(resolve))
    if (typeof fault === 'object') await ('gate' in fault ? fault.gate : fault.late)
    // A request sent is applied whether or not its caller still listens; only one not yet sent is not.
    if (signal.aborted && fault === undefined && entry.op === 'read') throw signal.reason
    if (fault === 'throw-before') throw unavailable(entry.key, 'connection reset')
    if (fault === 429 || fault === 503) throw unavailable(entry.key, `HTTP ${fault}`)
  }
}

function matches(wanted: Op | 'write', op: Op): boolean {
  return wanted === op || (wanted === 'write' && (op === 'create' || op === 'replace'))
}

function unavailable(key: string, what: string): BackendUnavailableError {
  return new BackendUnavailableError(`fake store: ${what} (${key})`, { key, retryable: true })
}
