/**
 * ZooKeeper as the queue-lock engine's driver (src/engines/queue-driver.ts): a lock's queue is the
 * children of its node, in Curator's order (layout.ts); each step is one request or two pipelined on one
 * connection.
 *
 * Every request about our entry goes on the connection of the session that created it: ZooKeeper orders
 * a client's requests, so a listing sent after our create sees it (another connection's server may still
 * be behind). A waiter watches the entry before ours on that same connection.
 */
import { posix } from 'node:path'
import type {
  Cancel,
  HeldEvents,
  OwnEntry,
  QueueDriver,
  QueueState,
  Watch,
} from '../../engines/queue-driver.js'
import {
  CODE,
  children,
  codeOf,
  create,
  EPHEMERAL_SEQUENTIAL,
  mkdirp,
  NODE_DELETED,
  read,
  remove,
  stat,
  type ZkClient,
  zxidOf,
} from './client.js'
import { inLine, lockPath, protectedName } from './layout.js'
import type { ZkSession } from './sessions.js'

/** Another's entry, as a listing on `client` found it. */
export interface ZkEntry {
  readonly path: string
  readonly client: ZkClient
}

/** What we know of an acquire's entry, by its name (`<lock path>/_c_<id>-lock-`). */
interface Known {
  readonly session: ZkSession
  /** The node ZooKeeper created (with its sequence number), once a reply or a listing told us. */
  node?: string
  /** A create was sent on this session: a retry lists the queue first, in case it landed. */
  sent?: boolean
}

const GONE = 'its node is gone from ZooKeeper (deleted, or its session expired)'

export class ZkQueue implements QueueDriver<ZkSession, ZkEntry> {
  readonly #prefix: string
  /** Our entries by name: the session that creates each one, and its node. Dropped by remove. */
  readonly #known = new Map<string, Known>()
  /** Whether a watch on another's entry found it there (so `exists` right after need not ask again). */
  readonly #seen = new WeakMap<ZkEntry, boolean>()

  constructor(prefix: string) {
    this.#prefix = prefix
  }

  queueOf(key: string): string {
    return lockPath(key, this.#prefix)
  }

  /** Curator's protected name, its id made of our owner id: unique to the acquire. */
  nameOf(queue: string, lease: ZkSession, owner: string): string {
    const name = `${queue}/${protectedName(owner)}`
    const known = this.#known.get(name)
    // A new session (the old one was lost) creates a new node under the same name.
    if (known?.session !== lease) this.#known.set(name, { session: lease })
    return name
  }

  /**
   * Creates our node unless an earlier attempt did (a listing finds its protected name: only this acquire
   * writes it, as Curator's `findProtectedNodeInForeground` after a connection loss), then lists the
   * queue. The create and the listing are pipelined: one round trip; our node's czxid (the fence) costs a
   * second, an `exists` of the node the create named.
   */
  async enqueue(queue: string, name: string, value: string, lease: ZkSession) {
    const known = this.#known.get(name) ?? { session: lease }
    this.#known.set(name, known)
    const { client } = lease
    const mine = posix.basename(name)
    let names: string[] | undefined
    if (known.node === undefined && known.session === lease && known.sent) {
      // An earlier create may have landed with its reply lost: find it before creating another.
      names = (await children(client, queue)) ?? []
      const found = names.find((child) => child.startsWith(mine))
      if (found) known.node = `${queue}/${found}`
    }
    known.sent = true
    if (known.node === undefined) {
      const made = await this.#create(client, queue, name, value)
      known.node = made.node
      names = made.names
    } else names = (await children(client, queue)) ?? []
    const node = known.node
    const s = await stat(client, node)
    // Gone already (its session expired meanwhile): not in line.
    if (!s || !names.includes(posix.basename(node))) return { position: undefined, first: false }
    return { position: zxidOf(s.czxid), first: inLine(names)[0] === posix.basename(node) }
  }

  /**
   * Our create and the listing after it, pipelined. A missing lock node (first use, or deleted since:
   * Curator's reaper deletes empty lock nodes) is made with its parents, persistent (this client speaks
   * ZooKeeper 3.4's protocol: no container nodes), then the create is sent again once; if the node vanished
   * again in between, the error is retryable and the core's next attempt starts over.
   */
  async #create(client: ZkClient, queue: string, name: string, value: string) {
    const send = () => {
      const made = create(client, name, Buffer.from(value, 'utf8'), EPHEMERAL_SEQUENTIAL)
      const listed = children(client, queue)
      // The listing fails with the create when the lock node is missing: only the create's error counts.
      listed.catch(() => {})
      return Promise.all([made, listed])
    }
    try {
      const [node, names] = await send()
      return { node, names: names ?? [] }
    } catch (error) {
      if (codeOf(error) !== CODE.NO_NODE) throw error
    }
    await mkdirp(client, queue).catch((error: unknown) => {
      if (codeOf(error) !== CODE.NODE_EXISTS) throw error
    })
    const [node, names] = await send()
    return { node, names: names ?? [] }
  }

  /** The entry before ours in Curator's order, and whether ours is still there: one listing. */
  async check(entry: OwnEntry): Promise<QueueState<ZkEntry>> {
    const known = this.#known.get(entry.name)
    if (!known?.node || known.session.ended) return { before: undefined, mine: false }
    const { client } = known.session
    const line = inLine((await children(client, entry.queue)) ?? [])
    const at = line.indexOf(posix.basename(known.node))
    if (at < 0) return { before: undefined, mine: false }
    return { before: at === 0 ? undefined : { path: `${entry.queue}/${line[at - 1]}`, client }, mine: true }
  }

  /**
   * A data watch on the entry before ours (as Curator's `getData().usingWatcher()`): it fires on that
   * node's deletion, or on a change of its data, a hint all the same. A node already gone sets no watch
   * and wakes us at once.
   */
  async watch(before: ZkEntry): Promise<Watch> {
    let wake!: (at: bigint | undefined) => void
    const gone = new Promise<bigint | undefined>((resolve) => {
      wake = resolve
    })
    try {
      const found = await read(before.client, before.path, () => wake(undefined))
      this.#seen.set(before, found !== undefined)
      if (!found) wake(undefined)
    } catch {
      // The watch failed (connection lost): a hint; the engine checks again.
      wake(undefined)
    }
    // ZooKeeper cannot cancel a watch with this protocol: a cancelled one fires into a settled promise.
    return { gone, cancel: () => wake(undefined) }
  }

  async exists(before: ZkEntry): Promise<boolean> {
    const seen = this.#seen.get(before)
    this.#seen.delete(before)
    if (seen !== undefined) return seen
    return (await stat(before.client, before.path)) !== undefined
  }

  async read(entry: OwnEntry) {
    const known = this.#known.get(entry.name)
    if (!known?.node || known.session.ended) return { mine: false, at: entry.position }
    const s = await stat(known.session.client, known.node)
    const mine = s !== undefined && zxidOf(s.czxid) === entry.position
    return { mine, at: s ? zxidOf(s.mzxid) : entry.position }
  }

  /**
   * An `exists` watch on our own node: its deletion (by anyone, or with our session) reports the loss. The
   * client sets its watches again after a reconnection, from the last zxid it saw, so a deletion while it
   * was disconnected is still reported. Any other event (our data changed) makes the engine read and
   * watch again.
   */
  watchHeld(entry: OwnEntry, _from: bigint, events: HeldEvents): Cancel {
    let active = true
    const known = this.#known.get(entry.name)
    const cancel = {
      cancel: () => {
        active = false
      },
    }
    if (!known?.node) {
      queueMicrotask(() => active && events.deleted(GONE))
      return cancel
    }
    const watcher = (event: { readonly type: number }) => {
      if (!active) return
      if (event.type === NODE_DELETED) events.deleted(`${GONE} (a watch saw it deleted)`)
      else events.failed()
    }
    stat(known.session.client, known.node, watcher).then(
      (s) => {
        if (active && (!s || zxidOf(s.czxid) !== entry.position)) events.deleted(GONE)
      },
      () => {
        if (active) events.failed()
      },
    )
    return cancel
  }

  /** Only our node (its protected name and sequence are unique to this acquire) goes. */
  async remove(entry: OwnEntry): Promise<boolean> {
    const known = this.#known.get(entry.name)
    this.#known.delete(entry.name)
    if (!known?.node || known.session.ended) return false
    return await remove(known.session.client, known.node)
  }

  /**
   * Deletes every node carrying one of these protected names (an acquire's creates whose replies were
   * lost too): a listing of each lock, then the deletes. A session that ended took its nodes with it.
   */
  async removeNames(names: readonly string[]): Promise<void> {
    await Promise.all(
      names.map(async (name) => {
        const known = this.#known.get(name)
        this.#known.delete(name)
        if (!known || known.session.ended) return
        const { client } = known.session
        const queue = posix.dirname(name)
        const mine = posix.basename(name)
        const found = ((await children(client, queue)) ?? []).filter((child) => child.startsWith(mine))
        await Promise.all(found.map((child) => remove(client, `${queue}/${child}`)))
      }),
    )
  }

  /** The session timeout of our own session that created `node`, if it is ours (for `inspect`). */
  timeoutOf(node: string): number | undefined {
    for (const known of this.#known.values()) {
      if (known.node === node && !known.session.ended) return known.session.client.getSessionTimeout()
    }
    return undefined
  }

  goneReason(at?: bigint): string {
    return at === undefined ? GONE : `${GONE}; found missing after zxid 0x${at.toString(16)}`
  }

  async close(): Promise<void> {}
}
