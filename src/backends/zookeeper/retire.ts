/**
 * Deleting the lock nodes this client stopped using, so that ZooKeeper keeps a node per lock in use, not
 * one per name ever locked (Curator's parents are container nodes, which the server reaps; this client
 * speaks ZooKeeper 3.4's protocol, which has none).
 *
 * A lock node is deleted `afterMs` after this client's last release of it, unless the client used the
 * lock again meanwhile: a lock taken over and over keeps its node (deleting it at every release would cost
 * a quorum write each time, and the next acquire a round trip to make it again). Safe whoever else uses
 * the lock: ZooKeeper deletes only an empty node, atomically, so a node with anyone's child in it (a
 * holder, a waiter, Curator's) fails with NOTEMPTY and stays; an acquire whose create meets the deletion
 * finds the node missing and makes it again (queue.ts). Fences are zxids, global to the ensemble: the
 * first fence of a node made again is above every fence of the one deleted.
 *
 * Best effort: a delete that fails for any other reason (a lost connection, an expired session) leaves the
 * node, as does a client that crashes; `doctor` counts the nodes kept. Its one timer lives here rather
 * than in an engine because no other store needs it.
 */
import { posix } from 'node:path'
import { now, timerDelay } from '../../core/clock.js'
import { remove, type ZkClient } from './client.js'

/** Released lock nodes remembered at most: past it, the oldest is deleted at once. */
const MAX_REMEMBERED = 100_000

/** How long `close()` waits for the deletes it sends. */
const CLOSE_WAIT_MS = 1_000

export class NodeRetirer {
  readonly #afterMs: number
  /** The node's parent goes too, if empty (a semaphore's node, whose `leases` child is the queue). */
  readonly #parentToo: boolean
  /** Lock nodes by path, oldest release first (a Map keeps insertion order): the client to delete with. */
  readonly #released = new Map<string, { readonly client: ZkClient; readonly at: number }>()
  #timer: NodeJS.Timeout | undefined

  constructor(afterMs: number, parentToo = false) {
    this.#afterMs = afterMs
    this.#parentToo = parentToo
  }

  /** Deletes `path` if empty, then its parent if asked and empty. */
  #delete(client: ZkClient, path: string): Promise<void> {
    const deleted = deleteIfEmpty(client, path)
    return this.#parentToo ? deleted.then(() => deleteIfEmpty(client, posix.dirname(path))) : deleted
  }

  /** This client released (or gave up) its place in `path`: delete the node once it stays unused. */
  released(path: string, client: ZkClient): void {
    this.#released.delete(path)
    this.#released.set(path, { client, at: now() })
    if (this.#released.size > MAX_REMEMBERED) {
      const [oldest, entry] = this.#released.entries().next().value!
      this.#released.delete(oldest)
      void this.#delete(entry.client, oldest)
    }
    this.#arm()
  }

  /** This client is using `path` again: keep it. */
  used(path: string): void {
    this.#released.delete(path)
  }

  /** Deletes every remembered node now (the client's sessions are about to end), waiting at most 1 s. */
  async close(): Promise<void> {
    clearTimeout(this.#timer)
    this.#timer = undefined
    const deletes = [...this.#released].map(([path, { client }]) => this.#delete(client, path))
    this.#released.clear()
    if (deletes.length === 0) return
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      Promise.all(deletes),
      new Promise((resolve) => {
        timer = setTimeout(resolve, CLOSE_WAIT_MS)
      }),
    ])
    clearTimeout(timer)
  }

  #arm(): void {
    if (this.#timer !== undefined) return
    const first = this.#released.values().next().value
    if (!first) return
    this.#timer = setTimeout(() => this.#sweep(), timerDelay(first.at + this.#afterMs - now()))
    this.#timer.unref()
  }

  #sweep(): void {
    this.#timer = undefined
    const due = now() - this.#afterMs
    for (const [path, { client, at }] of this.#released) {
      if (at > due) break
      this.#released.delete(path)
      void this.#delete(client, path)
    }
    this.#arm()
  }
}

/** Deletes `path` if it has no children; every failure (NOTEMPTY, a lost connection) leaves it. */
function deleteIfEmpty(client: ZkClient, path: string): Promise<void> {
  const state = client.getState().name
  if (state !== 'SYNC_CONNECTED' && state !== 'CONNECTED_READ_ONLY') return Promise.resolve()
  return remove(client, path).then(
    () => {},
    () => {},
  )
}
