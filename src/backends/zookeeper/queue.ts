/**
 * ZooKeeper as the queue-lock engine's adapter (src/engines/queue/adapter.ts): a lock's queue is the
 * children of its node, in Curator's order (layout.ts); each step is one request or two pipelined on one
 * connection.
 *
 * Every request about our entry goes on the connection of the session that created it: ZooKeeper orders
 * a client's requests, so a listing sent after our create sees it (another connection's server may still
 * be behind). A waiter watches the entry before ours on that same connection.
 */
import { posix } from 'node:path'
import { now } from '../../core/clock.js'
import type {
  Cancel,
  HeldEvents,
  OwnEntry,
  QueueAdapter,
  QueueState,
  SetEnqueued,
  SetEntry,
  Watch,
} from '../../engines/queue/adapter.js'
import {
  CODE,
  children,
  codeOf,
  create,
  createAll,
  EPHEMERAL_SEQUENTIAL,
  mkdirp,
  NODE_DELETED,
  read,
  remove,
  removeAll,
  stat,
  type Watcher,
  type ZkClient,
  zxidOf,
} from './client.js'
import { entryData, inLine, LOCK_NAME, lockPath, protectedName } from './layout.js'
import { NodeRetirer } from './retire.js'
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
  node?: string | undefined
  /** A create was sent on this session: a retry lists the queue first, in case it landed. */
  sent?: boolean
  /** The watch that enqueue's `exists` (the one that read our czxid) left on our node; see `watchHeld`. */
  held?: HeldWatch | undefined
}

/**
 * The one-shot `exists` watch that enqueue sets on our node while reading its czxid, kept for `watchHeld`:
 * a holder's watch then costs no request of its own. It was set by a reply that found the node with
 * czxid `position`, so no change after that reply is missed: one that comes before a holder listens is
 * kept in `fired` and told to it when it starts (a waiter's node may be deleted while it waits).
 */
interface HeldWatch {
  readonly position: bigint
  /** The watch's event, once it fired with nobody listening. */
  fired?: { readonly type: number }
  /** The holder listening (watchHeld), until it cancels. */
  listener?: Watcher | undefined
}

/**
 * What kind of queue an adapter keeps: a lock's (Curator's `InterProcessMutex`: `lock-` children whose data
 * is the owner, the holder and the session timeout), or an election's (election.ts).
 */
export interface QueueKind {
  /** The node of the queue named `key` under `prefix`. */
  queueOf(key: string, prefix: string): string
  /** The word before each child's sequence number (`lock-`, `latch-`). */
  readonly childName: string
  /** Our child's data, for an entry of value `value` on a session of `sessionTimeoutMs`. */
  data(value: string, sessionTimeoutMs: number): Buffer
  /** The children of queue `queue` in line order; throws for children of another kind (a mixed path). */
  line(names: readonly string[], queue: string): string[]
  /** Whether the queue's parent goes with the queue's node when it is retired (a semaphore's, retire.ts). */
  readonly retireParent?: boolean
}

/** A lock's queue (Curator's `InterProcessMutex`). */
export const LOCK_QUEUE: QueueKind = {
  queueOf: lockPath,
  childName: LOCK_NAME,
  data: entryData,
  line: (names) => inLine(names),
}

const GONE = 'its node is gone from ZooKeeper (deleted, or its session expired)'

/** The newest `looksBack` entries ahead of `node` in `line` (a queue's children in Curator's order), oldest first. */
function ahead(
  queue: string,
  line: readonly string[],
  node: string,
  looksBack: number,
  client: ZkClient,
): ZkEntry[] {
  const at = line.indexOf(posix.basename(node))
  return line
    .slice(Math.max(0, at - looksBack), Math.max(0, at))
    .map((child) => ({ path: `${queue}/${child}`, client }))
}

/** Whether `child` of `entry`'s queue carries `entry`'s protected name (unique to its acquire). */
const named = (entry: SetEntry, child: string): boolean => child.startsWith(posix.basename(entry.name))

export class ZkQueue implements QueueAdapter<ZkSession, ZkEntry> {
  readonly #prefix: string
  /** Our entries by name: the session that creates each one, and its node. Dropped by remove. */
  readonly #known = new Map<string, Known>()
  /** The watches in place on others' entries, per connection and path: who to wake when each fires. */
  readonly #armed = new WeakMap<ZkClient, Map<string, Set<() => void>>>()
  /** Whether a watch on another's entry found it there (so `exists` right after need not ask again). */
  readonly #seen = new WeakMap<ZkEntry, boolean>()

  /** Deletes the lock nodes this client stopped using (retire.ts). */
  readonly #retirer: NodeRetirer
  readonly #kind: QueueKind

  constructor(prefix: string, retireAfterMs: number, kind: QueueKind = LOCK_QUEUE) {
    this.#prefix = prefix
    this.#retirer = new NodeRetirer(retireAfterMs, kind.retireParent ?? false)
    this.#kind = kind
  }

  queueOf(key: string): string {
    return this.#kind.queueOf(key, this.#prefix)
  }

  /** Our entry's node and the connection of its session, while it is known (an election proclaims on it). */
  nodeOf(entry: OwnEntry): { readonly client: ZkClient; readonly path: string } | undefined {
    const known = this.#known.get(entry.name)
    if (!known?.node || known.session.ended) return undefined
    return { client: known.session.client, path: known.node }
  }

  /** The word before the sequence number of `owner`'s child (a semaphore's says its permits). */
  protected childNameOf(_owner: string): string {
    return this.#kind.childName
  }

  /** Told of each listing that found our entry `name` at `node` in `line` (a semaphore's adapter). */
  protected listed(_name: string, _line: readonly string[], _node: string): void {}

  /** Curator's protected name, its id made of our owner id: unique to the acquire. */
  nameOf(queue: string, lease: ZkSession, owner: string): string {
    const name = `${queue}/${protectedName(owner, this.childNameOf(owner))}`
    const known = this.#known.get(name)
    // A new session (the old one was lost) creates a new node under the same name.
    if (known?.session !== lease) this.#known.set(name, { session: lease })
    return name
  }

  /**
   * Creates our node unless an earlier attempt did (a listing finds its protected name: only this acquire
   * writes it, as Curator's `findProtectedNodeInForeground` after a connection loss), then lists the
   * queue. The create and the listing are pipelined: one round trip; our node's czxid (the fence) costs a
   * second, an `exists` of the node the create named, which also sets the watch a holder keeps on its node
   * (`watchHeld`): one request for both.
   */
  async enqueue(queue: string, name: string, value: string, lease: ZkSession, looksBack: number) {
    const known = this.#known.get(name) ?? { session: lease }
    this.#known.set(name, known)
    this.#retirer.used(queue)
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
      const made = await this.#create(lease, queue, name, value)
      known.node = made.node
      names = made.names
    } else names = (await children(client, queue)) ?? []
    const node = known.node
    // A watch left by an earlier attempt's `exists` on this node is still in place (or its event kept):
    // no second one (the client would fire both).
    const held = known.held
    const s = await stat(client, node, held ? undefined : this.#holdWatch(known))
    if (!s || !names.includes(posix.basename(node))) {
      // Gone, its session alive: deleted by someone (an operator's `deleteall`). Forgotten, so that the
      // next attempt creates a new node (with a new sequence) instead of finding this one for ever.
      if (!lease.ended) {
        known.node = undefined
        known.held = undefined
      }
      return { position: undefined }
    }
    const position = zxidOf(s.czxid)
    // The watch counts for the node this reply found: the client registered it with the reply.
    if (!held && known.held === undefined) known.held = { position }
    // Another node of this acquire (a create whose reply was lost, and that the listing looking for it
    // did not see yet: a server behind the leader) is ahead of ours: deleted, never waited for. It lives
    // on our own session, which we keep alive, so we (and everyone behind) would wait for it for ever.
    const strays = names.filter((child) => child.startsWith(mine) && child !== posix.basename(node))
    if (strays.length > 0) {
      await Promise.all(strays.map((child) => remove(client, `${queue}/${child}`)))
      names = names.filter((child) => !strays.includes(child))
    }
    // The listing was sent after our create (or found our node): the entries ahead of ours in it are the
    // ones the engine decides from (and a waiter watches one of them first).
    const line = this.#kind.line(names, queue)
    this.listed(name, line, node)
    return { position, ahead: ahead(queue, line, node, looksBack, client) }
  }

  /**
   * The watcher enqueue's `exists` sets on our node. Its event goes to the holder listening, or is kept
   * until one starts (`watchHeld`). Either way it is told once: the watch is spent, and a later
   * `watchHeld` (the engine reads and watches again after a non-deletion event) sets a new one.
   */
  #holdWatch(known: Known): Watcher {
    return (event) => {
      const held = known.held
      if (!held) {
        // Fired before the reply that registers it was processed (the client registers with the reply,
        // so this does not happen; kept for safety): recorded for the holder all the same.
        known.held = { position: -1n, fired: event }
        return
      }
      if (held.listener) {
        known.held = undefined
        held.listener(event)
      } else held.fired = event
    }
  }

  /**
   * Our create and the listing after it, pipelined. A missing lock node (first use, or deleted since:
   * Curator's reaper deletes empty lock nodes) is made with its parents, persistent (this client speaks
   * ZooKeeper 3.4's protocol: no container nodes), then the create is sent again once; if the node vanished
   * again in between, the error is retryable and the core's next attempt starts over.
   */
  async #create(lease: ZkSession, queue: string, name: string, value: string) {
    const { client } = lease
    const send = async () => {
      const sentAt = now()
      // Connected (the session's id is known): the timeout is the one the server negotiated.
      const data = this.#kind.data(value, client.getSessionTimeout())
      const made = create(client, name, data, EPHEMERAL_SEQUENTIAL)
      const listed = children(client, queue)
      // The listing fails with the create when the lock node is missing: only the create's error counts.
      listed.catch(() => {})
      const answered = await Promise.all([made, listed])
      // A write the leader ordered: evidence of the session's life at the leader (evidence.ts).
      lease.evidence.answered(sentAt, client.getSessionTimeout())
      return answered
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

  /**
   * An atomic set's step: ONE multi creating every key's node (the node `enqueue` creates: same protected
   * name, data, session), then one listing per line and a stat of one node (the multi's zxid, every
   * node's czxid and fence), pipelined. Each node first in its line: all taken (a listing follows our
   * multi, entries created later are behind ours, and earlier ones can only leave, so each was first from
   * that listing on, and all are at once). Else every node of ours is deleted in one multi: a set never
   * waits in a line. A single acquirer that listed our node meanwhile watches it, and is woken by that
   * delete. Two sets sharing lines cannot both lose for ever on each other: one multi is before the other
   * in every line they share. After a lost reply, a listing finds what the multi created first.
   *
   * A node with one of the set's names that the step did not create or find (`#strays`) is ours too: a
   * multi whose reply was lost, unseen by the listing after it (a server behind the leader, or its commit
   * between the listings), then seen. It is deleted, never waited for: it lives on our own session, which
   * we keep alive, so the set (and every acquirer behind it) would wait for it for ever.
   */
  async enqueueAll(entries: readonly SetEntry[], lease: ZkSession): Promise<SetEnqueued<ZkEntry>> {
    const { client } = lease
    const known = entries.map(({ name }) => {
      const found = this.#known.get(name)
      if (found?.session === lease) return found
      const fresh: Known = { session: lease }
      this.#known.set(name, fresh)
      return fresh
    })
    for (const { queue } of entries) this.#retirer.used(queue)
    if (known.some((k) => k.node === undefined && k.sent)) {
      // A multi whose reply was lost may have created our nodes (all or none): found by their names.
      const lines = await Promise.all(entries.map(({ queue }) => children(client, queue)))
      for (const [i, { queue, name }] of entries.entries()) {
        const child = lines[i]?.find((c) => c.startsWith(posix.basename(name)))
        if (child) known[i]!.node = `${queue}/${child}`
      }
    }
    if (known.every((k) => k.node === undefined)) {
      // A line seen taken refuses the set before any create: our nodes appear only when every line
      // looked empty, so a single acquirer rarely finds one of them ahead of it for a moment.
      const before = await this.#lines(client, entries)
      const strays = this.#strays(entries, known, before)
      if (strays.length > 0) await removeAll(client, strays)
      const taken = before.map((names, i) => names.filter((child) => !named(entries[i]!, child)))
      if (taken.some((names) => names.length > 0)) return { heads: this.#heads(client, entries, taken) }
      for (const k of known) k.sent = true
      const nodes = await this.#createAll(lease, entries)
      for (const [i, node] of nodes.entries()) known[i]!.node = node
    }
    const first = known.find((k) => k.node !== undefined)!.node!
    const [s, line] = await Promise.all([stat(client, first), this.#lines(client, entries)])
    const ours = known.map((k, i) => k.node !== undefined && line[i]![0] === posix.basename(k.node))
    const strays = this.#strays(entries, known, line)
    if (s && ours.every(Boolean)) {
      // Behind ours now, first once we release: gone first (best effort, our hold does not depend on it).
      if (strays.length > 0) await removeAll(client, strays).catch(() => {})
      return { positions: entries.map(() => zxidOf(s.czxid)) }
    }
    const mine = known.flatMap((k) => (k.node === undefined ? [] : [k.node]))
    await removeAll(client, [...mine, ...strays])
    for (const k of known) {
      k.node = undefined
      k.sent = false
    }
    // In each line where ours was not first, the entry that was (ours may have gone with the session).
    const others = line.map((names, i) =>
      ours[i] ? [] : names.filter((child) => !named(entries[i]!, child)),
    )
    return { heads: this.#heads(client, entries, others) }
  }

  /** The nodes in `lines` carrying one of the set's names, other than those `known` holds: ours, unheard of. */
  #strays(entries: readonly SetEntry[], known: readonly Known[], lines: readonly string[][]): string[] {
    return lines.flatMap((names, i) => {
      const { queue } = entries[i]!
      return names
        .filter((child) => named(entries[i]!, child) && known[i]!.node !== `${queue}/${child}`)
        .map((child) => `${queue}/${child}`)
    })
  }

  /** Each line of `entries`, in Curator's order: one listing each, pipelined. */
  async #lines(client: ZkClient, entries: readonly SetEntry[]): Promise<string[][]> {
    const lines = await Promise.all(entries.map(({ queue }) => children(client, queue)))
    return lines.map((names, i) => this.#kind.line(names ?? [], entries[i]!.queue))
  }

  /** The first entry of each line of `lines` (undefined for an empty one), to wait for. */
  #heads(client: ZkClient, entries: readonly SetEntry[], lines: readonly string[][]) {
    return lines.map((names, i) =>
      names[0] === undefined ? undefined : { path: `${entries[i]!.queue}/${names[0]}`, client },
    )
  }

  /** The atomic set's multi of creates; a missing lock node is made as for `#create`, then sent again once. */
  async #createAll(lease: ZkSession, entries: readonly SetEntry[]) {
    const { client } = lease
    const send = async () => {
      const sentAt = now()
      const timeout = client.getSessionTimeout()
      const nodes = entries.map(({ name, value }) => ({ path: name, data: this.#kind.data(value, timeout) }))
      const made = await createAll(client, nodes, EPHEMERAL_SEQUENTIAL)
      lease.evidence.answered(sentAt, timeout)
      return made
    }
    try {
      return await send()
    } catch (error) {
      if (codeOf(error) !== CODE.NO_NODE) throw error
    }
    await Promise.all(
      entries.map(({ queue }) =>
        mkdirp(client, queue).catch((error: unknown) => {
          if (codeOf(error) !== CODE.NODE_EXISTS) throw error
        }),
      ),
    )
    return await send()
  }

  /** The entries ahead of ours in Curator's order, and whether ours is still there: one listing. */
  async check(entry: OwnEntry, looksBack: number): Promise<QueueState<ZkEntry>> {
    const known = this.#known.get(entry.name)
    if (!known?.node || known.session.ended) return { ahead: [], mine: false }
    const { client } = known.session
    const line = this.#kind.line((await children(client, entry.queue)) ?? [], entry.queue)
    if (!line.includes(posix.basename(known.node))) return { ahead: [], mine: false }
    this.listed(entry.name, line, known.node)
    return { ahead: ahead(entry.queue, line, known.node, looksBack, client), mine: true }
  }

  /**
   * A data watch on the entry before ours (as Curator's `getData().usingWatcher()`): it fires on that
   * node's deletion, or on a change of its data, a hint all the same. A node already gone sets no watch
   * and wakes us at once. One watch per node and connection until it fires (the server keeps one per
   * connection and path anyway): a waiter that waits again on the same predecessor, say after the core's
   * own timer ended its wait, joins the watch in place instead of piling up another.
   */
  async watch(before: ZkEntry): Promise<Watch> {
    let wake!: () => void
    const gone = new Promise<bigint | undefined>((resolve) => {
      wake = () => resolve(undefined)
    })
    let armed = this.#armed.get(before.client)
    if (!armed) {
      armed = new Map()
      this.#armed.set(before.client, armed)
    }
    const onPath = armed
    let waiting = onPath.get(before.path)
    const fresh = waiting === undefined
    if (!waiting) {
      waiting = new Set()
      onPath.set(before.path, waiting)
    }
    const all = waiting
    all.add(wake)
    const fire = () => {
      if (onPath.get(before.path) === all) onPath.delete(before.path)
      for (const w of all) w()
    }
    try {
      const found = await read(before.client, before.path, fresh ? fire : undefined)
      this.#seen.set(before, found !== undefined)
      // No node, no watch left behind: a fresh entry goes (so the next waiter registers one).
      if (!found) (fresh ? fire : wake)()
    } catch {
      // The watch failed (connection lost): a hint; the engine checks again.
      ;(fresh ? fire : wake)()
    }
    // ZooKeeper cannot remove a watch with this protocol: a cancelled waiter only stops listening.
    return {
      gone,
      cancel: () => {
        all.delete(wake)
        wake()
      },
    }
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
   *
   * The watch enqueue's `exists` left on the node is taken over when it is still unspent: it has been in
   * place since a reply found the node ours, before any grant, so it covers every change from `from` on
   * (an event that came before we listen was kept and is told now). Otherwise (spent, or the node was
   * found by another session's attempt) a new `exists` sets one.
   */
  watchHeld(entry: OwnEntry, _from: bigint, events: HeldEvents): Cancel {
    let active = true
    const known = this.#known.get(entry.name)
    const watcher = (event: { readonly type: number }) => {
      if (!active) return
      if (event.type === NODE_DELETED) events.deleted(`${GONE} (a watch saw it deleted)`)
      else events.failed()
    }
    const held = known?.held
    const cancel = {
      cancel: () => {
        active = false
        if (held?.listener === watcher) held.listener = undefined
      },
    }
    if (!known?.node) {
      queueMicrotask(() => active && events.deleted(GONE))
      return cancel
    }
    if (held && held.position === entry.position && !known.session.ended) {
      const fired = held.fired
      if (fired) {
        // Spent before we listened: told now (a later watchHeld sets a new watch).
        known.held = undefined
        queueMicrotask(() => watcher(fired))
      } else held.listener = watcher
      return cancel
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
    const removed = await remove(known.session.client, known.node)
    this.#retirer.released(entry.queue, known.session.client)
    return removed
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
        this.#retirer.released(queue, client)
      }),
    )
  }

  goneReason(at?: bigint): string {
    return at === undefined ? GONE : `${GONE}; found missing after zxid 0x${at.toString(16)}`
  }

  async close(): Promise<void> {
    await this.#retirer.close()
  }
}
