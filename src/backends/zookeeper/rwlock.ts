/**
 * Read-write locks on ZooKeeper, on the queue-lock engine (src/engines/queue/rwlock.ts), in Apache
 * Curator's `InterProcessReadWriteLock` layout, so a Java service's read-write lock on the same path and
 * fencelock clients are in one line: a writer of either excludes everyone, readers of both share.
 *
 * - Layout (layout.ts): the read-write lock named `n` is the node `<prefix>/%rwlock/<n escaped>` (Curator's
 *   `basePath`), apart from every lock, election and semaphore; each acquire adds one child, created
 *   EPHEMERAL_SEQUENTIAL in Curator's protected mode: `_c_<owner id as a UUID>-__READ__<sequence>` for a
 *   reader, `…-__WRIT__<sequence>` for a writer (one sequence counter for both: they are children of one
 *   node), its data the owner, the holder and the session timeout (as a lock's child). Line order is by
 *   the sequence (Curator's `SortingLockInternalsDriver`).
 * - Grant (grants.ts `readWriteRule`): a writer when its child is first; a reader when no writer's child
 *   is ahead of its own. Curator decides the same from the names.
 * - Downgrade: our writer's child keeps its name and place; its data gets a last line `downgraded`.
 *   fencelock's readers read the data of a writer's child at the head of the line (the only place a
 *   downgraded one can be: a writer is granted only when first) and join it; Curator's readers read only
 *   names and wait until it is released: safe, and no writer queued behind gets in between.
 * - Fence: the child's czxid (engine's rwlock.ts says why that meets the read-write rule).
 * - Waiting, without a herd: a writer watches the child just before its own, a reader the newest writer's
 *   child ahead of its own (a data watch: it fires on that child's deletion and on its downgrade); the read
 *   after the watch is in place checks that the writer is still there and not downgraded.
 */
import { posix } from 'node:path'
import type {
  LeaseFacet,
  LockInfo,
  RwLockFacet,
  RwLockHolder,
  RwLockInfo,
  RwLockMode,
} from '../../core/backend.js'
import type { OwnEntry } from '../../engines/queue/adapter.js'
import { downgradedValue, isDowngraded, queueRwLock, tellingModes } from '../../engines/queue/rwlock.js'
import type { SessionAdapter } from '../../engines/session/adapter.js'
import { read, setDataAt, stat, type ZkClient, zxidOf } from './client.js'
import { entryData, isWriterNode, READ_NAME, rwLine, rwlockPath, WRITE_NAME } from './layout.js'
import { holderOf, readLine } from './line-read.js'
import { type QueueKind, type ZkEntry, ZkQueue } from './queue.js'
import type { ZkSession } from './sessions.js'

/** A child's data: a lock child's (`entryData`), with the last line `downgraded` once its writer downgraded. */
function rwEntryData(value: string, sessionTimeoutMs: number): Buffer {
  const downgraded = isDowngraded(value)
  const data = entryData(value.split('\n')[0]!, sessionTimeoutMs).toString('utf8')
  return Buffer.from(downgraded ? downgradedValue(data) : data, 'utf8')
}

/** A read-write lock's line: the `__READ__` and `__WRIT__` children of its node. */
const RW_QUEUE: QueueKind = {
  queueOf: rwlockPath,
  childName: READ_NAME,
  data: rwEntryData,
  line: (names) => rwLine(names),
}

/** Another's child, as a listing found it, and whether a reader waits for it (its downgrade frees that reader). */
interface RwEntry extends ZkEntry {
  readonly forReader?: boolean
}

/**
 * The queue of the read-write locks. The engine decides who is granted (grants.ts `readWriteRule`); this
 * adapter reads each child's mode with the line: its name, and for a writer's child at the head of the
 * line (when a reader asks) its data, which says whether it was downgraded.
 */
export class ZkRwLockQueue extends ZkQueue {
  /** The mode each acquire asks for, by owner, while it is under way or holds. */
  readonly modes = new Map<string, RwLockMode>()

  constructor(prefix: string, retireAfterMs: number) {
    super(prefix, retireAfterMs, RW_QUEUE)
  }

  protected override childNameOf(owner: string): string {
    return this.modes.get(owner) === 'write' ? WRITE_NAME : READ_NAME
  }

  override async enqueue(queue: string, name: string, value: string, lease: ZkSession, looksBack: number) {
    const put = await super.enqueue(queue, name, value, lease, looksBack)
    if (put.ahead === undefined) return put
    return { ...put, ...(await this.#moded(name, put.ahead, lease.client)) }
  }

  override async check(entry: OwnEntry, looksBack: number) {
    const state = await super.check(entry, looksBack)
    const node = this.nodeOf(entry)
    if (!state.mine || !node) return state
    return { mine: true, ...(await this.#moded(entry.name, state.ahead, node.client)) }
  }

  /** For a reader waiting on a writer: still there AND not downgraded (the watch fires on either change). */
  override async exists(before: ZkEntry): Promise<boolean> {
    if (!(before as RwEntry).forReader) return await super.exists(before)
    const found = await read(before.client, before.path)
    return found !== undefined && !isDowngraded(found.data.toString('utf8'))
  }

  /** A downgrade: our child's data rewritten, only while the child is ours (its czxid is the position). */
  async proclaim(entry: OwnEntry, value: string): Promise<boolean> {
    const node = this.nodeOf(entry)
    if (!node) return false
    const s = await stat(node.client, node.path)
    if (!s || zxidOf(s.czxid) !== entry.position) return false
    // The child's name is this acquire's alone (its protected id and sequence): no one else's is there.
    return await setDataAt(node.client, node.path, rwEntryData(value, node.client.getSessionTimeout()), -1)
  }

  /**
   * The entries ahead of our child `name` with their modes, for a reader (a writer's rule reads none):
   * each by its name, and a writer's child at the head of the line by its data too (one read).
   */
  async #moded(name: string, ahead: readonly ZkEntry[], client: ZkClient) {
    if (isWriterNode(posix.basename(name))) return { ahead: [...ahead] }
    const modes: RwLockMode[] = ahead.map((entry) =>
      isWriterNode(posix.basename(entry.path)) ? 'write' : 'read',
    )
    const head = ahead[0]
    if (head !== undefined && modes[0] === 'write') {
      const found = await read(client, head.path)
      if (!found || isDowngraded(found.data.toString('utf8'))) modes[0] = 'read'
    }
    return { ahead: ahead.map((entry): RwEntry => ({ ...entry, forReader: true })), modes }
  }
}

/**
 * The rwlock facet over the lock's sessions: the engine's leased methods on the read-write locks' queue,
 * the mode of each acquire told to the queue (its child's name). `reader` is the connection for reads
 * outside any lease; failures are said by `unavailable`.
 */
export function zookeeperRwLock(
  setup: {
    readonly prefix: string
    readonly retireAfterMs: number
    readonly leases: SessionAdapter<ZkSession>
    readonly reader: () => ZkClient
  },
  named: Pick<LeaseFacet, 'id' | 'capabilities' | 'limits'>,
  unavailable: (key: string, what: string, error: unknown) => Error,
): { readonly facet: RwLockFacet; close(): Promise<void> } {
  const queue = new ZkRwLockQueue(setup.prefix, setup.retireAfterMs)

  /** The line as it is now: each child's holder, mode, czxid and whether it holds. */
  const line = async (name: string, signal: AbortSignal) => {
    const found = await readLine(setup.reader(), rwlockPath(name, setup.prefix), rwLine, signal)
    if (!found) return undefined
    let writerAhead = false
    let downgradedAhead = false
    const entries = found.entries.map(({ child, data, sequence }, i) => {
      const downgraded = i === 0 && isWriterNode(child) && isDowngraded(data.toString('utf8'))
      const writer = isWriterNode(child) && !downgraded
      // A Curator reader (its data is not ours: no session timeout line) reads names only: behind a
      // downgraded writer it waits, though fencelock's readers there hold.
      const foreign = holderOf(child, data).timeoutMs === undefined
      const holds = writer ? i === 0 : !writerAhead && !(downgradedAhead && foreign)
      writerAhead ||= writer
      downgradedAhead ||= downgraded
      return { child, data, sequence, mode: (writer ? 'write' : 'read') as RwLockMode, holds }
    })
    return { entries, pzxid: found.pzxid }
  }
  const guarded = async <T>(name: string, signal: AbortSignal, step: () => Promise<T>) => {
    try {
      return await step()
    } catch (error) {
      if (signal.aborted) throw signal.reason
      throw unavailable(name, 'inspect', error)
    }
  }
  /** The latest fence: the node's pzxid is at least every child's czxid. */
  const latest = (found: { entries: readonly { sequence: bigint }[]; pzxid: bigint }) =>
    found.entries.reduce((max, e) => (e.sequence > max ? e.sequence : max), found.pzxid)

  const { facet, close } = queueRwLock(
    {
      queue,
      leases: setup.leases,
      inspect: (name: string, signal: AbortSignal): Promise<LockInfo | null> =>
        guarded(name, signal, async () => {
          const found = await line(name, signal)
          return found ? { held: found.entries.some((e) => e.holds), fence: latest(found) } : null
        }),
      holders: (name: string, signal: AbortSignal): Promise<RwLockInfo | null> =>
        guarded(name, signal, async () => {
          const found = await line(name, signal)
          if (!found) return null
          const holders: RwLockHolder[] = found.entries
            .filter((e) => e.holds)
            .map(({ child, data, sequence, mode }) => {
              const { timeoutMs, ...who } = holderOf(child, data)
              return {
                ...who,
                mode,
                fence: sequence,
                ...(timeoutMs === undefined ? {} : { expiresInMs: timeoutMs }),
              }
            })
          return { holders, waiting: found.entries.length - holders.length, fence: latest(found) }
        }),
    },
    named,
    unavailable,
  )
  return {
    facet: tellingModes(facet, queue.modes),
    close,
  }
}
