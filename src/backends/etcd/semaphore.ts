/**
 * Counting semaphores on etcd: the queue engine's semaphore (src/engines/queue/semaphore-engine.ts) over
 * a line of keys. Go's `concurrency` package has no semaphore recipe, so this layout is fencelock's own.
 *
 * - Layout: the semaphore named `s` lives under `<prefix>%semaphore/<s escaped>/` (layout.ts, apart from
 *   every lock and election): its limit in `%limit` (the decimal limit), and one entry per acquire,
 *   `<lease hex>-<owner>`, on the acquire's session lease, valued `{"owner","permits","limit","holder"}`
 *   (JSON). The entries in create-revision order are the line; an entry is granted when the permits of
 *   every entry before it plus its own fit under the limit.
 * - Limit: stored by a nested transaction inside the acquire's own transaction ("no limit key: put ours"),
 *   on the acquire's lease; so it lives while its writer's session does, and the semaphore is forgotten
 *   with its last user's lease. A limit found different is refused right after that transaction, before
 *   any grant: the entry it put is never granted, and until the core's abandon deletes it, it only counts
 *   ahead of later entries (they wait longer, none is admitted beyond the limit). If the limit's writer's
 *   lease ends while others still hold, the next acquire stores its own limit (the same, when every client
 *   opens the semaphore with the same limit, as they must). `setLimit` writes the key keeping its lease.
 * - Sequence: the entry's create revision (global, never goes back, also once the semaphore was forgotten).
 * - Expiry: an entry goes with its lease (etcd's clock), or by an owner-checked delete on release.
 * - Waiting: one watch per semaphore per client on the whole prefix (an entry leaving or a new limit may
 *   admit any waiter), from just after the waiter's latest read.
 * - `list` and `break` never see these keys (`%semaphore` is no lock's escaped name).
 */
import type { Etcd3, IKeyValue, IRequestOp, IResponseOp, Watcher } from 'etcd3'
import { raceSignal } from '../../core/abort.js'
import type { LockInfo, PermitHolder, SemaphoreInfo } from '../../core/backend.js'
import { MAX_SEMAPHORE_LIMIT } from '../../core/semaphore.js'
import type { Cancel } from '../../engines/queue/adapter.js'
import type { QueueSemaphoreParts } from '../../engines/queue/semaphore.js'
import type {
  LineEvents,
  LineRead,
  PermitEntry,
  PermitValue,
  SemaphoreAdapter,
} from '../../engines/queue/semaphore-adapter.js'
import { entriesStart, prefixEnd, semaphorePrefix } from './layout.js'
import { EtcdLeases, type LeaseId } from './leases.js'
import { leaseLeft } from './operations.js'

const limitKeyOf = (line: string): Buffer => Buffer.from(`${line}%limit`)

/** The oldest `limit` entries of `line` (0: all), created before `before` when given. */
const oldest = (line: string, limit: number, before?: bigint): IRequestOp => ({
  request_range: {
    key: Buffer.from(entriesStart(line)),
    range_end: prefixEnd(line),
    sort_target: 'Create',
    sort_order: 'Ascend',
    limit,
    ...(before === undefined ? {} : { max_create_revision: (before - 1n).toString() }),
  },
})

/** An entry's value; one not written by fencelock counts as one permit. */
function permitsOf(kv: IKeyValue): Partial<PermitValue> & { readonly permits: number } {
  try {
    const parsed = JSON.parse(kv.value.toString('utf8')) as Partial<PermitValue>
    if (Number.isSafeInteger(parsed.permits) && parsed.permits! >= 1) return parsed as PermitValue
  } catch {}
  return { permits: 1 }
}

const limitOf = (kv: IKeyValue | undefined): number | undefined => {
  const limit = kv ? Number(kv.value.toString('utf8')) : Number.NaN
  return Number.isSafeInteger(limit) && limit >= 1 ? limit : undefined
}

const kvsOf = (response: IResponseOp | undefined): IKeyValue[] => response?.response_range?.kvs ?? []

export class EtcdSemaphoreLine implements SemaphoreAdapter<LeaseId> {
  readonly #client: Etcd3
  readonly #prefix: string
  readonly #watchers = new Set<Watcher>()

  constructor(client: Etcd3, prefix: string) {
    this.#client = client
    this.#prefix = prefix
  }

  lineOf(name: string): string {
    return semaphorePrefix(name, this.#prefix)
  }

  nameOf(line: string, lease: LeaseId, owner: string): string {
    return `${line}${lease.hex}-${owner}`
  }

  /**
   * One transaction: if our key does not exist, put it; in either case store our limit unless one is
   * stored (a nested transaction), then read the limit, our key and the oldest `cap` + 1 entries (ours among
   * them, unless more than `cap` are ahead of it).
   */
  async enqueue(line: string, name: string, value: PermitValue, lease: LeaseId, cap: number) {
    const key = Buffer.from(name)
    const limitKey = limitKeyOf(line)
    const storeLimit: IRequestOp = {
      request_txn: {
        compare: [{ target: 'Create', result: 'Equal', key: limitKey, create_revision: 0 }],
        success: [
          { request_put: { key: limitKey, value: Buffer.from(String(value.limit)), lease: lease.decimal } },
        ],
        failure: [],
      },
    }
    const reads: IRequestOp[] = [
      { request_range: { key: limitKey } },
      { request_range: { key } },
      oldest(line, cap + 1),
    ]
    const reply = await this.#client.kv.txn({
      compare: [{ target: 'Create', result: 'Equal', key, create_revision: 0 }],
      success: [
        { request_put: { key, value: Buffer.from(JSON.stringify(value)), lease: lease.decimal } },
        storeLimit,
        ...reads,
      ],
      failure: [storeLimit, ...reads],
    })
    const [limitRead, mineRead, lineRead] = reply.responses.slice(-3)
    const mine = kvsOf(mineRead)[0]
    const entries = kvsOf(lineRead)
    const at = entries.findIndex((kv) => kv.create_revision === mine?.create_revision)
    return {
      limit: limitOf(kvsOf(limitRead)[0]),
      position: mine ? BigInt(mine.create_revision) : undefined,
      ahead: (at < 0 ? entries : entries.slice(0, at)).map((kv) => permitsOf(kv).permits),
      complete: at >= 0,
      at: BigInt(reply.header.revision),
    }
  }

  /** A read-only transaction (no raft write): the limit, our key, and up to `cap` entries before ours. */
  async check(entry: PermitEntry, cap: number): Promise<LineRead> {
    const reply = await this.#client.kv.txn({
      compare: [],
      success: [
        { request_range: { key: limitKeyOf(entry.line) } },
        { request_range: { key: Buffer.from(entry.name) } },
        oldest(entry.line, cap, entry.position),
      ],
      failure: [],
    })
    const [limitRead, mineRead, lineRead] = reply.responses
    const mine = kvsOf(mineRead)[0]
    return {
      limit: limitOf(kvsOf(limitRead)[0]),
      position: mine ? BigInt(mine.create_revision) : undefined,
      ahead: kvsOf(lineRead).map((kv) => permitsOf(kv).permits),
      complete: !lineRead?.response_range?.more,
      at: BigInt(reply.header.revision),
    }
  }

  async read(entry: PermitEntry): Promise<boolean> {
    const mine = (await this.#client.kv.range({ key: Buffer.from(entry.name) })).kvs[0]
    return mine !== undefined && BigInt(mine.create_revision) === entry.position
  }

  /** A watch on the whole prefix (the limit and every entry) from revision `from`: etcd replays from there. */
  watch(line: string, from: bigint, events: LineEvents): Cancel {
    const watcher = this.#client.watch().prefix(line).startRevision(from.toString()).watcher()
    this.#watchers.add(watcher)
    const changed = (kv: IKeyValue) => events.changed(BigInt(kv.mod_revision))
    watcher.on('put', changed)
    watcher.on('delete', changed)
    watcher.once('error', () => {
      this.#watchers.delete(watcher)
      events.failed()
    })
    return { cancel: () => this.#cancel(watcher) }
  }

  /** The limit key keeps its lease when it exists (`ignore_lease`), else goes on `lease`. */
  async storeLimit(line: string, limit: number, lease: LeaseId): Promise<void> {
    const key = limitKeyOf(line)
    const value = Buffer.from(String(limit))
    await this.#client.kv.txn({
      compare: [{ target: 'Create', result: 'Greater', key, create_revision: 0 }],
      success: [{ request_put: { key, value, ignore_lease: true } }],
      failure: [{ request_put: { key, value, lease: lease.decimal } }],
    })
  }

  async remove(entry: PermitEntry): Promise<boolean> {
    const key = Buffer.from(entry.name)
    const reply = await this.#client.kv.txn({
      compare: [{ target: 'Create', result: 'Equal', key, create_revision: entry.position.toString() }],
      success: [{ request_delete_range: { key } }],
      failure: [],
    })
    return reply.succeeded
  }

  async removeNames(names: readonly string[]): Promise<void> {
    await this.#client.kv.txn({
      compare: [],
      success: names.map((name) => ({ request_delete_range: { key: Buffer.from(name) } })),
      failure: [],
    })
  }

  goneReason(): string {
    return 'its key is gone from etcd (deleted, or its lease was revoked or expired)'
  }

  /** Cancels every watch left, without waiting for etcd's word (a server that does not answer would hold close). */
  async close(): Promise<void> {
    for (const watcher of [...this.#watchers]) this.#cancel(watcher)
  }

  #cancel(watcher: Watcher): void {
    if (!this.#watchers.delete(watcher)) return
    watcher.cancel().catch(() => {})
  }
}

/**
 * What the queue engine's semaphores need of etcd: the line's adapter, leases, and the reads of `inspect`
 * and `holders`. Failures of the reads are said by `unavailable`.
 */
export function etcdSemaphore(
  client: Etcd3,
  prefix: string,
  unavailable: (key: string, what: string, error: unknown) => Error,
): QueueSemaphoreParts<LeaseId> {
  /** The limit, the oldest entries (as many as a limit can admit), how many there are, and the revision. */
  const readLine = async (name: string, signal: AbortSignal) => {
    const line = semaphorePrefix(name, prefix)
    try {
      const reply = await raceSignal(
        client.kv.txn({
          compare: [],
          success: [
            { request_range: { key: limitKeyOf(line) } },
            oldest(line, MAX_SEMAPHORE_LIMIT),
            {
              request_range: {
                key: Buffer.from(entriesStart(line)),
                range_end: prefixEnd(line),
                count_only: true,
              },
            },
          ],
          failure: [],
        }),
        signal,
      )
      const [limitRead, lineRead, countRead] = reply.responses
      const entries = kvsOf(lineRead)
      return {
        limit: limitOf(kvsOf(limitRead)[0]) ?? (entries[0] ? permitsOf(entries[0]).limit : undefined),
        entries,
        count: Number(countRead?.response_range?.count ?? entries.length),
        revision: BigInt(reply.header.revision),
      }
    } catch (error) {
      throw unavailable(name, 'read', error)
    }
  }

  const holders = async (name: string, signal: AbortSignal): Promise<SemaphoreInfo | null> => {
    const { limit, entries, count } = await readLine(name, signal)
    if (limit === undefined && entries.length === 0) return null
    const stored = limit ?? 1
    // The granted entries: the longest run from the head of the line whose permits fit together.
    const granted: IKeyValue[] = []
    let held = 0
    for (const kv of entries) {
      const { permits } = permitsOf(kv)
      if (held + permits > stored) break
      held += permits
      granted.push(kv)
    }
    const leases = new Map<string, Promise<number | undefined>>()
    const left = (id: string) => {
      let known = leases.get(id)
      if (!known) {
        known = leaseLeft(client, id, signal).catch(() => undefined)
        leases.set(id, known)
      }
      return known
    }
    const list: PermitHolder[] = await Promise.all(
      granted.map(async (kv) => {
        const value = permitsOf(kv)
        const expiresInMs = await left(kv.lease)
        return {
          owner: value.owner ?? kv.key.toString('utf8'),
          ...(value.holder === undefined ? {} : { holder: value.holder }),
          permits: value.permits,
          sequence: BigInt(kv.create_revision),
          ...(expiresInMs === undefined ? {} : { expiresInMs }),
        }
      }),
    )
    return { limit: stored, held, holders: list, waiting: count - granted.length }
  }

  const inspect = async (name: string, signal: AbortSignal): Promise<LockInfo | null> => {
    const { limit, entries, revision } = await readLine(name, signal)
    if (limit === undefined && entries.length === 0) return null
    // The revision read: at least the latest sequence granted, below the next.
    return { held: entries.length > 0, fence: revision }
  }

  return {
    queue: new EtcdSemaphoreLine(client, prefix),
    leases: new EtcdLeases(client),
    holders,
    inspect,
  }
}
