/**
 * Read-write locks on etcd, on the queue-lock engine (src/engines/queue/rwlock.ts), in the layout of Go's
 * `recipe.RWMutex` (etcd's client/v3/experimental/recipes), so a Go service's read-write lock on the same
 * prefix and fencelock clients are in one line: a writer of either excludes everyone, readers share.
 *
 * - Layout (layout.ts): the read-write lock named `n` is the keys under `<prefix>%rwlock/<n escaped>/`
 *   (Go's `pfx + "/"`), one per acquire on its session lease: `read/<lease hex>-<owner>` for a reader,
 *   `write/<lease hex>-<owner>` for a writer, valued as a lock's key ("<owner> <holder>"), a writer's with
 *   a last line `gated`. The line is every key under the prefix by create revision.
 * - Grant (grants.ts `readWriteRule`): a writer when its key is first; a reader when no writer's key is
 *   ahead of its own. Go's recipe decides the same: its writer waits for the last key of any kind before
 *   its own, its reader for the last `write` key before its own.
 * - Gate: a fencelock writer's key comes with a second key on the same lease, put in the same transaction,
 *   `<prefix>%rwgate/<n escaped>/<lease hex>-<owner>` (outside the lock's prefix: Go's recipe never reads
 *   it). While it exists the writer is exclusive; a downgrade deletes it, owner-checked, and the writer's
 *   key stays as it was, so the entry keeps its place and its fence. A `write/` key counts as a reader's
 *   only when its value says `gated` and its gate is gone: a Go writer's key (no value) always excludes.
 * - Why not mark the writer's value, as on ZooKeeper: Go's recipe orders by mod revision
 *   (`WithLastRev`, `WithMaxModRev(myRev - 1)`), and a put moves a key's mod revision past the keys behind
 *   it. A Go writer queued behind our writer that reads the line after such a put finds nothing ahead of
 *   its own key and takes the lock while our downgraded writer still reads. We never write a key after
 *   creating it, so for Go's recipe mod and create revisions stay equal, and a Go reader behind a
 *   downgraded writer keeps seeing a writer and waits: safe, and no writer queued behind gets in between.
 * - Fence: the entry's create revision (the engine's rwlock.ts says why that meets the read-write rule).
 * - Waiting, without a herd: a writer watches the key just before its own, a reader the gate of the newest
 *   writer ahead (its deletion is the writer's release or downgrade; a Go writer's own key, which has no
 *   gate), on the one watcher per prefix this client keeps (queue-watch.ts).
 */
import type { Etcd3, IKeyValue, IRequestOp, IResponseOp } from 'etcd3'
import { raceSignal } from '../../core/abort.js'
import type {
  LeaseFacet,
  LockInfo,
  RwLockFacet,
  RwLockHolder,
  RwLockInfo,
  RwLockMode,
} from '../../core/backend.js'
import type { OwnEntry } from '../../engines/queue/adapter.js'
import { queueRwLock, tellingModes } from '../../engines/queue/rwlock.js'
import { gatesOf, prefixEnd, READERS, rwlockPrefix, WRITERS } from './layout.js'
import { EtcdLeases, type LeaseId } from './leases.js'
import { leaseLeft } from './operations.js'
import { EtcdQueue, firstOf } from './queue.js'

/** The last line of a fencelock writer's value: its exclusion is its gate's. */
const GATED = '\ngated'

/** One entry of a line, as the engine's rule and `inspect` take it. */
interface RwEntry {
  readonly kv: IKeyValue
  readonly mode: RwLockMode
  /** A writer's gate, when it has one: what a reader waits for. */
  readonly gate?: IKeyValue | undefined
  /** A fencelock writer's key whose gate is gone: a reader's entry, in a writer's place. */
  readonly downgraded?: boolean
}

/**
 * The entries of `line` (keys under its prefix, by create revision) with their modes, `gates` the keys
 * under its gates' prefix: a `write/` key is a writer's unless its value says `gated` and its gate is gone.
 */
function moded(
  line: string,
  kvs: readonly IKeyValue[],
  gates: readonly IKeyValue[],
  prefix: string,
): RwEntry[] {
  const byKey = new Map(gates.map((kv) => [kv.key.toString('latin1'), kv]))
  const writers = `${line}${WRITERS}`
  const gatePrefix = gatesOf(line, prefix)
  return kvs.map((kv) => {
    const key = kv.key.toString('latin1')
    if (!key.startsWith(writers)) return { kv, mode: 'read' }
    const gate = byKey.get(`${gatePrefix}${key.slice(writers.length)}`)
    const downgraded = gate === undefined && kv.value.toString('utf8').endsWith(GATED)
    return { kv, mode: downgraded ? 'read' : 'write', gate, downgraded }
  })
}

/** The range of every gate of the lock whose prefix is `line`. */
const gatesRange = (line: string, prefix: string): IRequestOp => {
  const gates = gatesOf(line, prefix)
  return { request_range: { key: Buffer.from(gates), range_end: prefixEnd(gates) } }
}

/** The queue of the read-write locks: the mutex's adapter with entries named by mode and writers' gates. */
export class EtcdRwLockQueue extends EtcdQueue {
  /** The mode each acquire asks for, by owner, while it is under way or holds. */
  readonly modes = new Map<string, RwLockMode>()
  readonly #client: Etcd3
  readonly #prefix: string

  constructor(client: Etcd3, prefix: string) {
    super(client, prefix)
    this.#client = client
    this.#prefix = prefix
  }

  override queueOf(key: string): string {
    return rwlockPrefix(key, this.#prefix)
  }

  override nameOf(queue: string, lease: LeaseId, owner: string): string {
    return `${queue}${this.modes.get(owner) === 'write' ? WRITERS : READERS}${lease.hex}-${owner}`
  }

  /** The gate of a writer's entry `name` in line `queue`; undefined for a reader's. */
  gateOf(queue: string, name: string): string | undefined {
    const writers = `${queue}${WRITERS}`
    return name.startsWith(writers)
      ? `${gatesOf(queue, this.#prefix)}${name.slice(writers.length)}`
      : undefined
  }

  override enqueue(queue: string, name: string, value: string, lease: LeaseId, looksBack: number) {
    const gated = this.gateOf(queue, name) === undefined ? value : `${value}${GATED}`
    return super.enqueue(queue, name, gated, lease, looksBack)
  }

  protected override entryPuts(name: string, lease: LeaseId): IRequestOp[] {
    const gate = this.gateOf(queueOfName(name), name)
    return gate === undefined ? [] : [{ request_put: { key: Buffer.from(gate), lease: lease.decimal } }]
  }

  protected override lineReads(queue: string): IRequestOp[] {
    return [gatesRange(queue, this.#prefix)]
  }

  /** A reader's rule reads each entry's mode; a writer ahead is waited for by its gate (or Go's key). */
  protected override ruled(queue: string, name: string, ahead: IKeyValue[], reads: readonly IResponseOp[]) {
    if (this.gateOf(queue, name) !== undefined) return { ahead }
    const entries = moded(queue, ahead, reads[0]?.response_range.kvs ?? [], this.#prefix)
    return { ahead: entries.map((e) => e.gate ?? e.kv), modes: entries.map((e) => e.mode) }
  }

  /** A downgrade: our writer's gate deleted, only while our key is the one we created. */
  proclaim(entry: OwnEntry): Promise<boolean> {
    const gate = this.gateOf(entry.queue, entry.name)
    if (gate === undefined) return this.ifOurs(entry)
    return this.ifOurs(entry, { request_delete_range: { key: Buffer.from(gate) } })
  }

  /** Our key and its gate go together, only if the key is the one we created. */
  override remove(entry: OwnEntry): Promise<boolean> {
    const gate = this.gateOf(entry.queue, entry.name)
    return this.ifOurs(
      entry,
      { request_delete_range: { key: Buffer.from(entry.name) } },
      ...(gate === undefined ? [] : [{ request_delete_range: { key: Buffer.from(gate) } }]),
    )
  }

  override removeNames(names: readonly string[]): Promise<void> {
    const gates = names.flatMap((name) => this.gateOf(queueOfName(name), name) ?? [])
    return super.removeNames([...names, ...gates])
  }

  /** The whole line of the lock named `name` with each entry's mode, and the revision it was read at. */
  async line(name: string, signal: AbortSignal) {
    const line = this.queueOf(name)
    const reply = await raceSignal(
      this.#client.kv.txn({
        compare: [],
        success: [firstOf(line, 0), gatesRange(line, this.#prefix)],
        failure: [],
      }),
      signal,
    )
    const kvs = reply.responses[0]?.response_range.kvs ?? []
    return {
      entries: moded(line, kvs, reply.responses[1]?.response_range.kvs ?? [], this.#prefix),
      revision: BigInt(reply.header.revision),
    }
  }
}

/** The line (`<…>%rwlock/<name>/`) of an entry's key `<line>read/<id>` or `<line>write/<id>`. */
function queueOfName(name: string): string {
  const end = name.lastIndexOf('/', name.lastIndexOf('/') - 1)
  return name.slice(0, end + 1)
}

/** A holder as `holders` reports it: the owner and holder from our value; a Go key's name as its owner. */
function holderOf(kv: IKeyValue): Pick<RwLockHolder, 'owner' | 'holder'> {
  const value = kv.value.toString('utf8').replace(GATED, '').split('\n')[0]!
  if (value === '') return { owner: kv.key.toString('utf8') }
  const space = value.indexOf(' ')
  return space < 0 ? { owner: value } : { owner: value.slice(0, space), holder: value.slice(space + 1) }
}

/**
 * The rwlock facet over etcd's sessions: the engine's leased methods on the read-write locks' queue, the
 * mode of each acquire told to the queue (its key's name). Failures are said by `unavailable`.
 */
export function etcdRwLock(
  client: Etcd3,
  prefix: string,
  named: Pick<LeaseFacet, 'id' | 'capabilities' | 'limits'>,
  unavailable: (key: string, what: string, error: unknown) => Error,
): { readonly facet: RwLockFacet; close(): Promise<void> } {
  const queue = new EtcdRwLockQueue(client, prefix)

  /** Who holds now: a writer when first; a reader with no writer ahead (a Go reader: nor a downgraded one). */
  const held = async (name: string, signal: AbortSignal) => {
    const { entries, revision } = await queue.line(name, signal)
    let writerAhead = false
    let downgradedAhead = false
    const found = entries.map((e, i) => {
      // Go's reader reads names only: behind a downgraded writer it waits, though ours there hold.
      const foreign = e.kv.value.length === 0
      const holds = e.mode === 'write' ? i === 0 : !writerAhead && !(downgradedAhead && foreign)
      writerAhead ||= e.mode === 'write'
      downgradedAhead ||= e.downgraded === true
      return { ...e, holds }
    })
    return { found, revision }
  }
  const guarded = async <T>(name: string, signal: AbortSignal, step: () => Promise<T>) => {
    try {
      return await step()
    } catch (error) {
      if (signal.aborted) throw signal.reason
      throw unavailable(name, 'inspect', error)
    }
  }

  const { facet, close } = queueRwLock(
    {
      queue,
      leases: new EtcdLeases(client),
      // The revision read at: at least every entry's create revision, so every fence granted so far.
      inspect: (name: string, signal: AbortSignal): Promise<LockInfo | null> =>
        guarded(name, signal, async () => {
          const { found, revision } = await held(name, signal)
          return { held: found.some((e) => e.holds), fence: revision }
        }),
      holders: (name: string, signal: AbortSignal): Promise<RwLockInfo | null> =>
        guarded(name, signal, async () => {
          const { found, revision } = await held(name, signal)
          const holders: RwLockHolder[] = []
          for (const e of found.filter((f) => f.holds)) {
            const left = await leaseLeft(client, e.kv.lease, signal)
            holders.push({
              ...holderOf(e.kv),
              mode: e.mode,
              fence: BigInt(e.kv.create_revision),
              ...(left === undefined ? {} : { expiresInMs: left }),
            })
          }
          return { holders, waiting: found.length - holders.length, fence: revision }
        }),
    },
    named,
    unavailable,
  )
  return { facet: tellingModes(facet, queue.modes), close }
}
