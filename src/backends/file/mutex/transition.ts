/**
 * The mutex's transitions of a lease it holds: extend and release (our record to the next generation, a
 * compare-and-swap on the very file we wrote), abandon (an attempt's possible grant freed,
 * owner-checked), resume (another process's lease, found for its token), and an election leader's proclaim
 * (the same transition, with a new value).
 */
import type { AcquireRequest, ExtendResult, HeldLease } from '../../../core/backend.js'
import { nextBase } from '../epochs.js'
import { collect, pendingIn } from '../generations.js'
import { monotonicMs } from '../host-clock.js'
import type { FolderRetirer } from '../retire.js'
import { folderOf, type Root } from '../root.js'
import type { SweepTrigger } from '../sweep.js'
import { baseOf, freeRecord, newRecord, type RecordV1, readCurrent } from './records.js'
import { WRITTEN, type Written, writtenId } from './written.js'

export async function extendLease(root: Root, lease: HeldLease, ttlMs: number): Promise<ExtendResult> {
  const start = monotonicMs()
  const { key, owner, fence } = lease
  // The holder's description (and an election's value) goes on from the record we extend (our own).
  const cookie = await transition(root, lease, (base, current) =>
    newRecord(
      {
        key,
        state: 'held',
        owner,
        fence,
        base,
        deadline: start + ttlMs,
        holder: current.holder,
        processes: root.processes,
        value: current.value,
      },
      root.boot,
    ),
  )
  return cookie === undefined ? { renewed: false } : { renewed: true, cookie }
}

export async function releaseLease(
  root: Root,
  lease: HeldLease,
  retirer: FolderRetirer,
  sweeper: SweepTrigger | undefined,
): Promise<boolean> {
  const cookie = await transition(root, lease, (base) => freeRecord(lease.key, lease.fence, base, root.boot))
  if (cookie === undefined) return false
  // Its folder goes once the key stays unused a while (retire.ts): the root keeps what is in use.
  retirer.released(cookie.folder, cookie.gen, cookie.stamp)
  sweeper?.used()
  return true
}

export async function abandonAttempt(root: Root, { key, owner }: AcquireRequest): Promise<void> {
  root.seenBy.delete(owner) // The acquire has ended: its hint is no longer armed.
  // An attempt whose caller gave up may have linked a held generation for us: free it, owner-checked.
  // The transition is a compare-and-swap on the very file we read, so a successor, or a new folder's
  // record of the same generation, is never touched.
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none' || current.record === 'unreadable') return
  if (current.record.state !== 'held' || current.record.owner !== owner) return
  const fence = BigInt(current.record.fence)
  const cookie: Written = { folder, gen: current.gen, record: current.record, stamp: current.stamp }
  await transition(root, { key, owner, fence, cookie }, (base) => freeRecord(key, fence, base, root.boot))
}

/**
 * The cookie of a lease another process took, for a resume from its token: the very file of its record, read
 * now, while it is held by `lease`'s owner with its fence; undefined otherwise. A later transition checks,
 * as every one does, that the file is still in place.
 */
export async function resumeLease(
  root: Root,
  { key, owner, fence }: HeldLease,
): Promise<Written | undefined> {
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none' || current.record === 'unreadable') return undefined
  const r = current.record
  if (r.state !== 'held' || r.owner !== owner || BigInt(r.fence) !== fence) return undefined
  return { folder, gen: current.gen, record: r, stamp: current.stamp }
}

/**
 * An election leader's new value: our record to the next generation with `value`, its deadline unchanged
 * (not a renewal). The same compare-and-swap as extend: undefined when the grant is no longer ours.
 */
export function proclaimValue(root: Root, lease: HeldLease, value: string): Promise<Written | undefined> {
  return transition(root, lease, (base, current) =>
    newRecord({ ...fieldsOf(current), base, value }, root.boot),
  )
}

/** A record's fields as `newRecord` takes them. */
function fieldsOf(r: RecordV1) {
  return {
    key: r.key,
    state: r.state,
    owner: r.owner,
    fence: BigInt(r.fence),
    deadline: r.deadline,
    holder: r.holder,
    processes: r.processes,
  }
}

/**
 * Moves a lease we hold from its generation to the next one; undefined when it is no longer ours. The
 * cookie names the very file of our record (generation, inode, mtime): while that file is still the name
 * N of the folder, nobody else has written after it (a successor N+1 fails our link), so no listing and
 * no read are needed. Any other file there means the lease expired and someone took over, or it was
 * broken, or its folder was removed (a new folder's record of the same generation is another file), or
 * its files were put back by hand: in every case the lease is no longer ours.
 */
async function transition(
  root: Root,
  lease: HeldLease,
  next: (base: bigint, current: RecordV1) => RecordV1,
): Promise<Written | undefined> {
  const held = lease.cookie as Written
  const { folder } = held
  const id = writtenId(root, lease.key)
  // Owner-checked, as the contract says: a cookie alone releases nothing for another owner.
  if (held.record.owner !== lease.owner) return undefined
  // The temp file pins the folder; `holds` checks, after it, that our record is still in place there.
  const pending = pendingIn(folder)
  try {
    if (!pending?.holds(held.gen, held.stamp)) {
      WRITTEN.forget(id)
      return undefined
    }
    const gen = held.gen + 1n
    // Our own live record: written in this boot, so its base goes on.
    const base = await nextBase(root, baseOf(held.record), gen, folder)
    const record = next(base, held.record)
    const stamp = await pending.write(record, undefined)
    const names = await pending.commit(gen, undefined, held.stamp)
    if (!names) {
      WRITTEN.forget(id)
      return undefined
    }
    collect(folder, gen, names)
    const cookie: Written = { folder, gen, record, stamp }
    WRITTEN.remember(id, cookie)
    return cookie
  } finally {
    pending?.discard()
  }
}
