/**
 * Counting semaphores on ZooKeeper, on the queue-lock engine (src/engines/queue/engine.ts), in Apache
 * Curator's `InterProcessSemaphoreV2` layout, so a Java service's semaphore with the same limit and
 * fencelock clients on the same path count each other's leases.
 *
 * - Layout (layout.ts): the semaphore named `s` is the node `<prefix>/%semaphore/<s escaped>`, apart from
 *   every lock and election; its `leases` child holds one child per acquire, created EPHEMERAL_SEQUENTIAL
 *   in Curator's protected mode: `_c_<owner id as a UUID>-lease-<sequence>` for one permit,
 *   `_c_<owner id>-<k>-lease-<sequence>` for k, its data the owner, the holder and the session timeout (as
 *   a lock's child). The `leases` node's data is the stored limit, `limit <n>` (Curator writes none there and
 *   reads none: it has no stored limit).
 * - Grant: the engine's rule (src/engines/queue/grants.ts `permitsRule`): in sequence order, a lease holds
 *   once the permits of every lease before it (held or waiting) plus its own fit under the limit; so a
 *   large request is never passed by smaller ones behind it, and a Curator lease (one permit) counts as
 *   one. The limit is read with each listing. Curator grants when the number of children is at most its
 *   maxLeases: a fencelock lease of k permits counts as one there, so share a semaphore with Curator with
 *   one permit per acquire and the same limit.
 * - Fence (the permit's sequence): the lease's czxid, a zxid, store-wide and never going back, also after
 *   the `leases` node was deleted and made again (its own sequence numbers restart at 0).
 * - Waiting, without a herd (semaphore-watch.ts): the first waiting lease watches the `leases` node's
 *   children (any lease ahead leaving may admit it); every later one watches the waiting lease just ahead
 *   of its own, which, once admitted with a lease behind it, writes its data again once (version 0 to 1:
 *   the one write a contended grant adds); each also watches the limit (the `leases` node's data). A
 *   release so wakes one waiter per semaphore. Curator's admission mutex (`<path>/locks`) is not taken:
 *   safety does not need it (every lease counts every lease created before it), and it would cost every
 *   acquire two more writes (its node's create and delete); only Curator's own waiters line up there.
 * - Orphans (Curator's CURATOR-315): the engine deletes an abandoned acquire's children by protected name,
 *   once its creates have settled, so a create whose reply was lost leaves no lease behind.
 * - Storage: the `leases` node and its parent are deleted once unused (retire.ts), the limit with them.
 *
 * `storedLimit` reads again after a concurrent writer of the `leases` node (a create that met another's,
 * a conditional write that lost): at most twice, as each loss means another client stored its limit.
 */
import { posix } from 'node:path'
import { raceSignal } from '../../core/abort.js'
import type {
  AcquireRequest,
  HeldLease,
  LockInfo,
  PermitHolder,
  SemaphoreFacet,
  SemaphoreInfo,
} from '../../core/backend.js'
import { LimitMismatchError } from '../../core/errors.js'
import type { OwnEntry, Watch } from '../../engines/queue/adapter.js'
import { QueueLock } from '../../engines/queue/engine.js'
import { permitsRule } from '../../engines/queue/grants.js'
import { queueLeasedMethods } from '../../engines/queue/leased-methods.js'
import type { SessionAdapter } from '../../engines/session/adapter.js'
import { CODE, codeOf, create, mkdirp, PERSISTENT, read, setDataAt, type ZkClient } from './client.js'
import {
  entryData,
  inLine,
  LEASE_NAME,
  leaseName,
  limitData,
  limitOf,
  permitsOf,
  semaphoreLeases,
} from './layout.js'
import { holderOf, readLine } from './line-read.js'
import { type QueueKind, type ZkEntry, ZkQueue } from './queue.js'
import { announce, type LineEntry, leasesOf, stillWaiting, waiterWatch } from './semaphore-watch.js'
import type { ZkSession } from './sessions.js'

/** A semaphore's queue: the `lease-` children of its `leases` node. */
export const SEMAPHORE_QUEUE: QueueKind = {
  queueOf: semaphoreLeases,
  childName: LEASE_NAME,
  data: entryData,
  line: (names) => inLine(names, LEASE_NAME),
  retireParent: true,
}

/**
 * The queue of the semaphores. The engine decides who is granted (grants.ts `permitsRule`); this adapter
 * reads what that rule counts with the line (each lease's permits, the stored limit), watches what it
 * waits for (semaphore-watch.ts) and tells the lease behind ours of our admission (`admitted`).
 */
export class ZkSemaphoreQueue extends ZkQueue {
  /** The permits each acquire asks for, by owner, while it is under way or holds. */
  readonly permits = new Map<string, number>()
  /** The limit last read per `leases` node, for a listing that found no stored limit (the node made again). */
  readonly limits = new Map<string, number>()
  /** The data version of each `leases` node at our latest read of its limit: a watch set later compares. */
  readonly #versions = new Map<string, number>()
  /** Our entries, by name, whose latest listing found a lease behind: their admission is told. */
  readonly #followed = new Set<string>()
  /** The value each of our entries was written with, by name: telling its admission writes it again. */
  readonly #values = new Map<string, string>()
  /** The entries whose watch was just set: its setting read compared them (`exists` need not read again). */
  readonly #watched = new WeakSet<ZkEntry>()

  constructor(prefix: string, retireAfterMs: number) {
    super(prefix, retireAfterMs, SEMAPHORE_QUEUE)
  }

  protected override childNameOf(owner: string): string {
    return leaseName(this.permits.get(owner) ?? 1)
  }

  protected override listed(name: string, line: readonly string[], node: string): void {
    const at = line.indexOf(posix.basename(node))
    if (at >= 0 && at < line.length - 1) this.#followed.add(name)
    else this.#followed.delete(name)
  }

  override async enqueue(queue: string, name: string, value: string, lease: ZkSession, _looksBack: number) {
    this.#values.set(name, value)
    const limit = this.#readLimit(lease.client, queue)
    const put = await super.enqueue(queue, name, value, lease, Number.POSITIVE_INFINITY)
    if (put.ahead === undefined) return put
    return { ...put, ...this.#counted(queue, put.ahead, await limit, lease.client) }
  }

  override async check(entry: OwnEntry, _looksBack: number) {
    const node = this.nodeOf(entry)
    const limit = node ? this.#readLimit(node.client, entry.queue) : Promise.resolve(undefined)
    const state = await super.check(entry, Number.POSITIVE_INFINITY)
    const stored = await limit
    if (!state.mine || !node) return state
    return { mine: true, ...this.#counted(entry.queue, state.ahead, stored, node.client) }
  }

  /** The waiter's watch on the line or the lease ahead (semaphore-watch.ts), and on the limit. */
  override async watch(before: ZkEntry): Promise<Watch> {
    const leases = leasesOf(before.path)
    const watch = await waiterWatch(before as LineEntry, leases, this.#versions.get(leases))
    this.#watched.add(before)
    return watch
  }

  override async exists(before: ZkEntry): Promise<boolean> {
    if (this.#watched.delete(before)) return true
    return await stillWaiting(before as LineEntry, leasesOf(before.path))
  }

  admitted(entry: OwnEntry): void {
    const node = this.nodeOf(entry)
    const value = this.#values.get(entry.name)
    if (node && value !== undefined && this.#followed.has(entry.name)) announce(node.client, node.path, value)
  }

  override async remove(entry: OwnEntry): Promise<boolean> {
    this.#forget(entry.name)
    return await super.remove(entry)
  }

  override async removeNames(names: readonly string[]): Promise<void> {
    for (const name of names) this.#forget(name)
    await super.removeNames(names)
  }

  #forget(name: string): void {
    this.#followed.delete(name)
    this.#values.delete(name)
  }

  /** The limit stored in `leases` (undefined: none, or the read failed), its data version remembered. */
  #readLimit(client: ZkClient, leases: string): Promise<number | undefined> {
    return read(client, leases).then(
      (found) => {
        if (!found) return undefined
        this.#versions.set(leases, found.stat.version)
        return limitOf(found.data)
      },
      () => undefined,
    )
  }

  /**
   * What the grant rule counts with the entries ahead of ours: their permits (from their names), the stored
   * limit (or the one last read, for a `leases` node made again without one), and the line as a thing to
   * wait for. Each entry carries the names ahead of ours, which its watch compares with what it finds.
   */
  #counted(queue: string, found: readonly ZkEntry[], stored: number | undefined, client: ZkClient) {
    const names = found.map((entry) => posix.basename(entry.path))
    const ahead: LineEntry[] = found.map((entry) => ({ ...entry, ahead: names }))
    const line: LineEntry = { path: queue, client, ahead: names }
    const limit = stored ?? this.limits.get(queue) ?? 1
    return { ahead, counted: { permits: names.map(permitsOf), limit, line } }
  }
}

/**
 * The semaphore's stored limit, storing `limit` when there is none (no `leases` node, or Curator's without
 * data). See the header for the second read.
 */
async function storedLimit(client: ZkClient, leases: string, limit: number, tries = 3): Promise<number> {
  const found = await read(client, leases)
  const stored = found && limitOf(found.data)
  if (stored !== undefined) return stored
  try {
    if (found) await setDataAt(client, leases, limitData(limit), found.stat.version)
    else {
      await mkdirp(client, posix.dirname(leases)).catch((error: unknown) => {
        if (codeOf(error) !== CODE.NODE_EXISTS) throw error
      })
      await create(client, leases, limitData(limit), PERSISTENT)
    }
    return limit
  } catch (error) {
    const raced = codeOf(error) === CODE.NODE_EXISTS || codeOf(error) === CODE.BAD_VERSION
    if (!raced || tries <= 1) throw error
    return await storedLimit(client, leases, limit, tries - 1)
  }
}

/**
 * The semaphore facet over the lock's sessions: the engine's leased methods on the semaphores' queue, with
 * the stored limit checked before each attempt; a wait's watch ends at a new limit too (`watch`). `reader` is the
 * connection for reads outside any lease; failures are said by `unavailable`.
 */
export function zookeeperSemaphore(
  setup: {
    readonly id: string
    readonly prefix: string
    readonly retireAfterMs: number
    readonly leases: SessionAdapter<ZkSession>
    readonly reader: () => ZkClient
  },
  named: Pick<SemaphoreFacet, 'id' | 'capabilities' | 'limits'>,
  unavailable: (key: string, what: string, error: unknown) => Error,
): { readonly facet: SemaphoreFacet; close(): Promise<void> } {
  const queue = new ZkSemaphoreQueue(setup.prefix, setup.retireAfterMs)
  const engine = new QueueLock(queue, setup.leases, {
    grants: (req) => permitsRule(req.semaphore?.permits ?? 1),
  })
  const methods = queueLeasedMethods(engine, unavailable)
  const leasesOf = (name: string) => semaphoreLeases(name, setup.prefix)

  /** The leases in line order with their data and czxid (gone ones skipped), and the stored limit. */
  const line = async (name: string, signal: AbortSignal) => {
    const found = await readLine(setup.reader(), leasesOf(name), (names) => inLine(names, LEASE_NAME), signal)
    return found && { limit: limitOf(found.data), entries: found.entries, pzxid: found.pzxid }
  }

  const facet: SemaphoreFacet = {
    ...named,
    ...methods,

    async tryAcquire(req: AcquireRequest, signal: AbortSignal) {
      const asked = req.semaphore
      if (!asked) throw new TypeError('A semaphore acquire carries `semaphore` (its limit and permits)')
      const leases = leasesOf(req.key)
      let stored: number
      try {
        stored = await raceSignal(storedLimit(setup.reader(), leases, asked.limit), signal)
      } catch (error) {
        if (signal.aborted) throw signal.reason
        throw unavailable(req.key, 'acquire', error)
      }
      if (stored !== asked.limit && !asked.limitCompared) {
        throw new LimitMismatchError(stored, asked.limit, { key: req.key, backend: setup.id })
      }
      queue.limits.set(leases, stored)
      queue.permits.set(req.owner, asked.permits)
      return await methods.tryAcquire(req, signal)
    },

    async release(lease: HeldLease, signal: AbortSignal) {
      queue.permits.delete(lease.owner)
      return await methods.release(lease, signal)
    },

    async abandon(req: AcquireRequest, signal: AbortSignal) {
      queue.permits.delete(req.owner)
      await methods.abandon(req, signal)
    },

    async inspect(name: string, signal: AbortSignal): Promise<LockInfo | null> {
      try {
        const found = await line(name, signal)
        if (!found) return null
        let fence = found.pzxid
        for (const entry of found.entries) if (entry.sequence > fence) fence = entry.sequence
        return { held: found.entries.length > 0, fence }
      } catch (error) {
        if (signal.aborted) throw signal.reason
        throw unavailable(name, 'inspect', error)
      }
    },

    async holders(name: string, signal: AbortSignal): Promise<SemaphoreInfo | null> {
      try {
        const found = await line(name, signal)
        if (!found) return null
        // No stored limit (a Curator-only semaphore): the leases' count is all that is known.
        const limit = found.limit ?? found.entries.length
        const holders: PermitHolder[] = []
        let held = 0
        let waiting = 0
        for (const { child, data, sequence } of found.entries) {
          const permits = permitsOf(child)
          if (waiting > 0 || held + permits > limit) {
            waiting++
            continue
          }
          held += permits
          const { timeoutMs, ...who } = holderOf(child, data)
          holders.push({
            ...who,
            permits,
            sequence,
            ...(timeoutMs === undefined ? {} : { expiresInMs: timeoutMs }),
          })
        }
        return { limit, held, holders, waiting }
      } catch (error) {
        if (signal.aborted) throw signal.reason
        throw unavailable(name, 'inspect', error)
      }
    },

    async setLimit(name: string, limit: number, signal: AbortSignal) {
      const client = setup.reader()
      const leases = leasesOf(name)
      try {
        const written = await raceSignal(setDataAt(client, leases, limitData(limit), -1), signal)
        if (written) return
        await raceSignal(storedLimit(client, leases, limit), signal)
        // Made by another meanwhile with its own limit: ours replaces it.
        await raceSignal(setDataAt(client, leases, limitData(limit), -1), signal)
      } catch (error) {
        if (signal.aborted) throw signal.reason
        throw unavailable(name, 'set the limit of', error)
      }
    },
  }
  return { facet, close: () => engine.close() }
}
