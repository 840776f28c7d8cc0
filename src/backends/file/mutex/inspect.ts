/**
 * What the mutex tells people of its keys: `inspect` (one key, read only: it never creates a folder) and
 * `list` (every key folder's current record, read only).
 */
import { opendir } from 'node:fs/promises'
import { join } from 'node:path'
import type { ListedLock, LockInfo } from '../../../core/backend.js'
import { EPOCH_FOLDER } from '../epochs.js'
import { monotonicMs } from '../host-clock.js'
import { folderOf, type Root } from '../root.js'
import { holderGone, isLive, type RecordV1, readCurrent } from './records.js'

/** Who holds `key`, as its folder says now. */
export async function inspectKey(root: Root, key: string): Promise<LockInfo> {
  // Read only: inspecting never creates a folder.
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none') {
    return {
      held: false,
      note:
        `no record in ${folder}${current.missing ? ' (no folder)' : ''}: the next grant takes a new epoch ` +
        `from ${join(root.dir, EPOCH_FOLDER)}, so its fence exceeds every fence granted before for this key; ` +
        'removing the whole lock root (or its .epoch folder) restarts epochs at the wall clock in ms, ' +
        'still above them unless the clock went back',
    }
  }
  if (current.record === 'unreadable') {
    return {
      held: true,
      note:
        `generation ${current.gen} in ${folder} is unreadable (corrupt, or written by a newer fencelock); it ` +
        `counts as held until it has been seen unchanged for ${root.unreadable.holdMs} ms`,
    }
  }
  const r = current.record
  if (!isLive(r, root.boot)) return { held: false, fence: BigInt(r.fence) }
  if (holderGone(r, root.boot)) {
    const pids = r.processes?.marks.map((m) => m.pid).join(', ')
    return {
      held: false,
      fence: BigInt(r.fence),
      note: `its holder's processes (pid ${pids}) have exited: the lease is over, the next acquire takes it`,
    }
  }
  return heldView(r)
}

/** `inspect`'s view of a live record. */
function heldView(r: RecordV1): LockInfo {
  return {
    held: true,
    owner: r.owner ?? '',
    ...(r.holder === undefined ? {} : { holder: r.holder }),
    fence: BigInt(r.fence),
    expiresInMs: r.deadline - monotonicMs(),
    ...(r.value === undefined ? {} : { value: r.value }),
  }
}

/**
 * The live leases of keys starting with `prefix`: one read of each key folder's current record (the
 * record holds its key; the folder's name is a hash). An unreadable record names no key, so it is left
 * out; `inspect` of its key says how it counts.
 */
export async function* listHeld(root: Root, prefix: string): AsyncGenerator<ListedLock> {
  const listing = await opendir(root.dir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined // No root yet: no locks.
    throw error
  })
  if (!listing) return
  // Key folders are the only entries with a `~` in their name (`.epoch`, `.boot`, temp names have none).
  for await (const entry of listing) {
    if (!entry.name.includes('~') || !entry.isDirectory()) continue
    const current = await readCurrent(join(root.dir, entry.name))
    if (current.record === 'none' || current.record === 'unreadable') continue
    const r = current.record
    if (r.key.startsWith(prefix) && isLive(r, root.boot) && !holderGone(r, root.boot)) {
      yield { key: r.key, ...heldView(r) }
    }
  }
}
