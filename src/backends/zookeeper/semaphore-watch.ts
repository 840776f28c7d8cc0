/**
 * What a waiter of a ZooKeeper semaphore watches (semaphore.ts), without a herd: the first waiting lease
 * watches the line (the `leases` node's children: any lease ahead leaving may admit it); every later one
 * watches the waiting lease just ahead of its own (its data: a lease admitted while another waits behind
 * it writes its data again once, `announce`; or its deletion); each also the limit (the `leases` node's
 * data). A release of a held lease so wakes one waiter per semaphore, not every waiter.
 *
 * A lease ahead that cannot tell its admission (a Curator lease, or one that told it already and waits
 * again after a lower limit) is waited for as the first waiter waits: on the line. Every watch is set
 * after the read that chose it, so it compares what it finds with that read (`LineEntry.ahead`): a change
 * in between wakes the waiter at once. One watch per connection and node, shared by this client's
 * waiters until it fires: ZooKeeper keeps one per connection and node anyway, and this client's
 * protocol cannot remove one.
 */
import { posix } from 'node:path'
import type { Watch } from '../../engines/queue/adapter.js'
import { children, read, setDataAt, stat, type ZkClient } from './client.js'
import { entryData } from './layout.js'
import type { ZkEntry } from './queue.js'

/** An entry a semaphore's waiter waits for: a lease ahead of its own, or the line (the `leases` node). */
export interface LineEntry extends ZkEntry {
  /** The names of the leases ahead of the waiter's own at the read that chose this entry. */
  readonly ahead: readonly string[]
}

/** A watch shared per connection and node until it fires; `found` is what its setting read. */
interface Shared<T> {
  readonly change: Promise<void>
  readonly found: Promise<T | undefined>
}

const shared = new WeakMap<ZkClient, Map<string, Shared<unknown>>>()

/** The watch of `kind` on `path` in place on `client`, or a new one that `set` sets (telling `fire`). */
function sharedWatch<T>(
  client: ZkClient,
  kind: string,
  path: string,
  set: (fire: () => void) => Promise<T | undefined>,
): Shared<T> {
  let on = shared.get(client)
  if (!on) {
    on = new Map()
    shared.set(client, on)
  }
  const watches = on
  const key = `${kind} ${path}`
  const existing = watches.get(key)
  if (existing) return existing as Shared<T>
  let fire!: () => void
  const change = new Promise<void>((resolve) => {
    fire = () => {
      if (watches.get(key) === made) watches.delete(key)
      resolve()
    }
  })
  // A watch that could not be set (connection lost) is a hint all the same: the waiter reads again.
  const found = set(() => fire()).then(
    (value) => {
      if (value === undefined) fire()
      return value
    },
    () => {
      fire()
      return undefined
    },
  )
  const made: Shared<T> = { change, found }
  watches.set(key, made)
  return made
}

/** Resolves when `found` settles with a value that `moved` says changed; never otherwise. */
const when = <T>(found: Promise<T>, moved: (value: T) => boolean) =>
  new Promise<void>((resolve) => {
    found.then((value) => moved(value) && resolve())
  })

/** A watch being set: `set` settles once it is in place (or failed), `change` at its event. */
interface Setting {
  readonly set: Promise<unknown>
  readonly change: Promise<void>
}

/**
 * The limit: the next change of `leases`' data (a new limit), its deletion or creation, or at once when its
 * data version is no longer `seen` (changed since the caller read the limit).
 */
function limitChange(client: ZkClient, leases: string, seen: number | undefined): Setting {
  const watch = sharedWatch(client, 'limit', leases, async (fire) => {
    const found = await read(client, leases, fire)
    if (found) return found.stat.version
    // No node: told of its creation instead.
    const made = await stat(client, leases, fire)
    if (made) fire()
    return -1
  })
  const moved = when(
    watch.found,
    (version) => version !== undefined && seen !== undefined && version !== seen,
  )
  return { set: watch.found, change: Promise.race([watch.change, moved]) }
}

/** The line: the next change of its children, or at once when a lease of `ahead` is gone already. */
function lineChange(client: ZkClient, leases: string, ahead: readonly string[]): Setting {
  const watch = sharedWatch(client, 'line', leases, (fire) => children(client, leases, fire))
  const moved = when(watch.found, (names) => !names || !ahead.every((name) => names.includes(name)))
  return { set: watch.found, change: Promise.race([watch.change, moved]) }
}

/** Whether a lease's data will tell its admission: fencelock's (layout.ts `entryData`), not told yet. */
const waitsToTell = (data: Buffer, version: number) =>
  version === 0 && /\nsession timeout \d+ ms$/.test(data.toString('utf8'))

/**
 * A waiting lease ahead: its deletion or the telling of its admission; for a lease that cannot tell it,
 * the line's next change.
 */
function leaseChange(before: LineEntry, leases: string): Setting {
  const watch = sharedWatch(before.client, 'lease', before.path, (fire) =>
    read(before.client, before.path, fire),
  )
  const then = watch.found.then((found): Setting => {
    if (!found || waitsToTell(found.data, found.stat.version))
      return { set: watch.found, change: watch.change }
    return lineChange(before.client, leases, before.ahead)
  })
  return {
    set: then.then((setting) => setting.set),
    change: then.then((setting) => setting.change),
  }
}

/**
 * The watch of a semaphore's waiter on `before` (the line, or a lease ahead) and on the limit, whose data
 * version the waiter's latest read saw; resolves once both are in place.
 */
export async function waiterWatch(
  before: LineEntry,
  leases: string,
  limitVersion: number | undefined,
): Promise<Watch> {
  const ended = new AbortController()
  const stop = new Promise<void>((resolve) => ended.signal.addEventListener('abort', () => resolve()))
  const own =
    before.path === leases ? lineChange(before.client, leases, before.ahead) : leaseChange(before, leases)
  const limit = limitChange(before.client, leases, limitVersion)
  await Promise.all([own.set, limit.set])
  return {
    gone: Promise.race([own.change, limit.change, stop]).then(() => undefined),
    cancel: () => ended.abort(),
  }
}

/**
 * Whether `before` is still what a waiter waits for, read without a watch (the fallback for a watch that
 * went silent): every lease ahead still there and, for a lease, not admitted.
 */
export async function stillWaiting(before: LineEntry, leases: string): Promise<boolean> {
  const names = await children(before.client, leases)
  if (!names || !before.ahead.every((n) => names.includes(n))) return false
  if (before.path === leases) return true
  const found = await read(before.client, before.path)
  return found !== undefined && found.stat.version === 0
}

/**
 * Tells the lease behind ours that ours was admitted: our data written again as it is, once (version 0),
 * which fires that waiter's data watch. A failure is not ours to handle: that waiter's own reads, once
 * per recheck interval, find the admission then.
 */
export function announce(client: ZkClient, node: string, value: string): void {
  const data = entryData(value, client.getSessionTimeout())
  setDataAt(client, node, data, 0).catch(() => {})
}

/** The `leases` node of a lease's path, or the path itself when it is that node. */
export const leasesOf = (path: string): string => (path.endsWith('/leases') ? path : posix.dirname(path))
