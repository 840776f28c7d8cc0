import {
  type AcquireRequest,
  type AttemptResult,
  type DowngradeResult,
  type ExtendResult,
  type LockInfo,
  placeKeptMs,
  type RwLockFacet,
  type RwLockInfo,
} from '../../../core/backend.js'
import { guarded } from '../errors.js'
import { monotonicMs } from '../host-clock.js'
import { innerRoot, innerRootMaker } from '../inner-root.js'
import type { FolderRetirer } from '../retire.js'
import { folderOf, type Root } from '../root.js'
import type { SweepTrigger } from '../sweep.js'
import { folderChanged } from '../watch.js'
import { type Change, type RecordKind, updateRecord, type Written } from '../whole-record.js'
import { entryCheckable, liveView, type RwEntry, type RwLockRecord, readRwLock } from './records.js'

export { RWLOCK_RECORDS } from './records.js'

/** The read-write locks' root in a lock root: no key folder has this name (they all contain `~`). */
export const RWLOCK_FOLDER = '.rwlocks'

/**
 * How soon a waiter refused by leases whose processes can be checked asks again: a holder's death writes
 * nothing a watch could see (the mutex's HOLDER_CHECK_MS).
 */
const HOLDER_CHECK_MS = 100

/** What a change writes: the record's own fields (the rest is filled in by ../whole-record.ts). */
interface Draft {
  readonly latest?: string | undefined
  readonly epoch?: string | undefined
  readonly line: readonly RwEntry[]
}

const RWLOCKS: RecordKind<RwLockRecord, Draft> = {
  what: 'read-write lock',
  read: readRwLock,
  live: liveView,
  build: (draft, { key, boot, base }) => ({
    v: 1,
    kind: 'rwlock',
    key,
    boot,
    base,
    ...(draft.latest === undefined ? {} : { latest: draft.latest }),
    ...(draft.epoch === undefined ? {} : { epoch: draft.epoch }),
    line: draft.line,
  }),
}

const update = <T>(root: Root, key: string, change: Change<T, RwLockRecord, Draft>) =>
  updateRecord(RWLOCKS, root, key, folderOf(root, key), change)

/** What the read-write locks' housekeeping is told: idle folders (to retire) and changes (to sweep). */
export interface RwLockHousekeeping {
  readonly retirer: FolderRetirer
  /** Undefined when the backend never sweeps. */
  readonly sweeper: SweepTrigger | undefined
}

/** The read-write locks' root of the lock root `root`: the same settings, its own folder and epochs. */
export function rwlockRoot(root: Root, unreadableHoldMs: number): Root {
  return innerRoot(root, RWLOCK_FOLDER, unreadableHoldMs)
}

/**
 * The read-write locks on `rws` (a `rwlockRoot`) inside the lock root `top`; every operation's failure is
 * reported as `guarded` (../errors.ts) says.
 */
export function fileRwLock(
  top: string,
  rws: Root,
  { retirer, sweeper }: RwLockHousekeeping,
  shell: Pick<RwLockFacet, 'id' | 'capabilities' | 'limits'>,
): RwLockFacet {
  /** Makes the root once, shared (1777) where the lock root is; a failure is not kept. */
  const madeOnce = innerRootMaker(top, rws)
  /** A change left the lock idle: its folder goes once it stays so a while (../retire.ts). */
  const housekeep = (key: string, written: Written<RwLockRecord> | undefined): void => {
    if (!written) return
    if (written.record.line.length === 0) retirer.released(folderOf(rws, key), written.gen, written.stamp)
    sweeper?.used()
  }
  /** The entry of `lease` if it still holds: owner and fence checked. */
  const held = (view: RwLockRecord | undefined, owner: string, fence: bigint): RwEntry | undefined =>
    view?.line.find((e) => e.owner === owner && e.fence !== undefined && BigInt(e.fence) === fence)

  const attempt = async (req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> => {
    const { key, owner, ttlMs, holder } = req
    const mode = req.rwlock?.mode
    if (!mode) throw new TypeError('A read-write lock acquire carries `rwlock` (its mode)')
    await madeOnce()
    // Deadlines count from before we look: never later than the lease the core believes in.
    const start = monotonicMs()
    const { answer, written } = await update<AttemptResult>(rws, key, {
      creates: true,
      signal,
      aborted: { granted: false },
      unreadable: (ms) => ({ granted: false, retryInMs: ms }),
      decide(view, gen) {
        // What this acquire has seen: its wake-up hint ignores events on generations up to this one.
        rws.seenBy.renew(owner, gen)
        const line = view?.line ?? []
        const i = line.findIndex((e) => e.owner === owner)
        const mine = line[i]
        // An earlier attempt of this acquire won and its reply was lost: what is left of that lease is ours.
        if (mine?.fence !== undefined) {
          return { done: { granted: true, fence: BigInt(mine.fence), ttlMs: mine.deadline - monotonicMs() } }
        }
        const ahead = i < 0 ? line : line.slice(0, i)
        const admitted =
          mode === 'write'
            ? ahead.length === 0
            : ahead.every((e) => e.mode === 'read' && e.fence !== undefined)
        const rest = line.filter((e) => e.owner !== owner)
        if (admitted) {
          return {
            write: (sequence) => {
              // A reader shares the read epoch while no writer was granted since it began.
              const shared = mode === 'read' && view?.epoch !== undefined && view.epoch === view.latest
              const fence = shared ? view.epoch! : sequence.toString()
              const entry: RwEntry = {
                owner,
                mode,
                fence,
                deadline: start + ttlMs,
                ...(holder === undefined ? {} : { holder }),
                ...(rws.processes === undefined ? {} : { processes: rws.processes }),
              }
              return {
                record: {
                  latest: shared ? view.latest : fence,
                  epoch: mode === 'read' ? fence : view?.epoch,
                  line: [...ahead, entry, ...rest.slice(ahead.length)],
                },
                answer: { granted: true, fence: BigInt(fence), ttlMs },
              }
            },
          }
        }
        const busy = { granted: false, queued: true, ...retryOf(view, ahead, rws.boot) } as const
        const keep = placeKeptMs(ttlMs)
        // A place kept long enough is not written again: each write wakes every waiter.
        if (mine && mine.deadline - monotonicMs() > keep / 2) return { done: busy }
        const kept: RwEntry = {
          owner,
          mode,
          deadline: monotonicMs() + keep,
          ...(holder === undefined ? {} : { holder }),
        }
        const nextLine = mine ? line.map((e) => (e === mine ? kept : e)) : [...line, kept]
        return { write: () => ({ record: { ...draftOf(view), line: nextLine }, answer: busy }) }
      },
    })
    if (answer.granted) rws.seenBy.delete(owner)
    // Our own place written: not news to us.
    else if (written) rws.seenBy.renew(owner, written.gen)
    if (written && answer.granted) sweeper?.used()
    return answer
  }

  return {
    ...shell,

    tryAcquire: (req, signal) =>
      guarded(rws, req.key, 'acquire the read-write lock', () => attempt(req, signal)),

    extend: (lease, ttlMs) =>
      guarded(rws, lease.key, 'extend the read-write lock', async () => {
        const start = monotonicMs()
        const { answer } = await update<ExtendResult>(rws, lease.key, {
          creates: false,
          unreadable: () => ({ renewed: false }),
          decide(view) {
            const mine = held(view, lease.owner, lease.fence)
            if (!view || !mine) return { done: { renewed: false } }
            const line = view.line.map((e) => (e === mine ? { ...mine, deadline: start + ttlMs } : e))
            return { write: () => ({ record: { ...draftOf(view), line }, answer: { renewed: true } }) }
          },
        })
        return answer
      }),

    release: (lease) =>
      guarded(rws, lease.key, 'release the read-write lock', async () => {
        const { answer, written } = await update<boolean>(rws, lease.key, {
          creates: false,
          unreadable: () => false,
          decide(view) {
            if (!view || !held(view, lease.owner, lease.fence)) return { done: false }
            const line = view.line.filter((e) => e.owner !== lease.owner)
            return { write: () => ({ record: { ...draftOf(view), line }, answer: true }) }
          },
        })
        housekeep(lease.key, written)
        return answer
      }),

    abandon: ({ key, owner }) =>
      guarded(rws, key, 'abandon an acquire of the read-write lock', async () => {
        rws.seenBy.delete(owner) // The acquire has ended: its hint is no longer armed.
        // Owner-checked: only what this acquire holds or where it waits.
        const { written } = await update<void>(rws, key, {
          creates: false,
          unreadable: () => undefined,
          decide(view) {
            if (!view?.line.some((e) => e.owner === owner)) return { done: undefined }
            const line = view.line.filter((e) => e.owner !== owner)
            return { write: () => ({ record: { ...draftOf(view), line }, answer: undefined }) }
          },
        })
        housekeep(key, written)
      }),

    downgrade: (lease) =>
      guarded(rws, lease.key, 'downgrade the read-write lock', async () => {
        const { answer } = await update<DowngradeResult>(rws, lease.key, {
          creates: false,
          unreadable: () => ({ downgraded: false }),
          decide(view) {
            const mine = held(view, lease.owner, lease.fence)
            if (!view || !mine) return { done: { downgraded: false } }
            // Already a reader: an earlier downgrade whose reply was lost.
            if (mine.mode === 'read') return { done: { downgraded: true } }
            // Its own entry, in its place: a writer queued behind still has an entry ahead of it.
            const line = view.line.map((e) => (e === mine ? { ...mine, mode: 'read' as const } : e))
            return { write: () => ({ record: { ...draftOf(view), line }, answer: { downgraded: true } }) }
          },
        })
        return answer
      }),

    inspect: (key) =>
      guarded(rws, key, 'inspect the read-write lock', async (): Promise<LockInfo | null> => {
        const view = await liveRecord(rws, key)
        if (view === 'unreadable') return { held: true }
        if (!view?.latest) return null
        return { held: view.line.some((e) => e.fence !== undefined), fence: BigInt(view.latest) }
      }),

    holders: (key) =>
      guarded(rws, key, 'inspect the read-write lock', async (): Promise<RwLockInfo | null> => {
        const view = await liveRecord(rws, key)
        if (view === undefined || view === 'unreadable') return null
        const t = monotonicMs()
        const granted = view.line.filter((e) => e.fence !== undefined)
        return {
          holders: granted.map((e) => ({
            owner: e.owner,
            mode: e.mode,
            ...(e.holder === undefined ? {} : { holder: e.holder }),
            fence: BigInt(e.fence!),
            expiresInMs: Math.floor(e.deadline - t),
          })),
          waiting: view.line.length - granted.length,
          ...(view.latest === undefined ? {} : { fence: BigInt(view.latest) }),
        }
      }),

    waitForChange: ({ key, owner }, signal) =>
      folderChanged(folderOf(rws, key), signal, () => rws.seenBy.get(owner)),
  }
}

/** A live record's fields as a change writes them on. */
const draftOf = (view: RwLockRecord | undefined): Draft => ({
  ...(view?.latest === undefined ? {} : { latest: view.latest }),
  ...(view?.epoch === undefined ? {} : { epoch: view.epoch }),
  line: view?.line ?? [],
})

/** When a refused waiter should look again: the soonest end of a lease or a kept place ahead of it. */
function retryOf(
  view: RwLockRecord | undefined,
  ahead: readonly RwEntry[],
  boot: string,
): { retryInMs?: number } {
  if (!view) return {}
  const t = monotonicMs()
  let soonest = Number.POSITIVE_INFINITY
  for (const entry of ahead) {
    soonest = Math.min(soonest, entry.deadline - t)
    if (entryCheckable(entry, view.boot, boot)) soonest = Math.min(soonest, HOLDER_CHECK_MS)
  }
  return soonest === Number.POSITIVE_INFINITY ? {} : { retryInMs: Math.max(0, Math.ceil(soonest)) }
}

/** The live view of the read-write lock `key`, 'unreadable', or undefined when nothing is kept. */
async function liveRecord(rws: Root, key: string): Promise<RwLockRecord | 'unreadable' | undefined> {
  const current = await readRwLock(folderOf(rws, key))
  if (current.record === 'none') return undefined
  if (current.record === 'unreadable') return current.record
  return liveView(current.record, rws.boot)
}
