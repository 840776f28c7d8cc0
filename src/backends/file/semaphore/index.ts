/**
 * Counting semaphores on the file backend, in a root of their own, `<root>/.semaphores/`: a folder per
 * semaphore in use (`<readable-prefix>~<hash>`, as a lock's), whose highest generation file is the
 * semaphore's whole state, `{ v: 1, kind: 'semaphore', key, limit, boot, base, latest, leases, line }`.
 * That root's name has no `~`, so no lock of any name, nor the mutex's list, sweep, prune or doctor, ever
 * sees a semaphore, and a semaphore `x`, a lock `x` and an election `x` are independent. It has its own
 * epoch counter and boot reservations, its own retirer and sweep, and is shared (1777) like its lock root.
 *
 * - Every change (an attempt that grants or queues, extend, release, abandon, setLimit) is one
 *   compare-and-swap of the whole record (update.ts): at most `limit` permits held by live leases.
 * - Expiry: each lease's deadline on the host's monotonic clock, tagged with the boot id, as a lock's:
 *   every process of the host reads the same clock, which no NTP step or administrator moves, and no
 *   client's wall clock decides anything. A lease also ends once all of its processes are certainly gone
 *   (../holders.ts), as a lock's does.
 * - The line: a request is granted only when it is first in line (or the line is empty) and its permits
 *   fit; a waiter's place lapses when it has not asked again for max(ttl, 3 s).
 * - Sequences: `base + generation` of the granting record, strictly increasing per semaphore, also after
 *   its folder was removed (update.ts).
 * - Storage: a semaphore nothing holds or waits for has its limit forgotten (the next acquire stores its
 *   own) and its folder retired or swept, as a released lock's is (../retire.ts, ../sweep.ts).
 * - Waiting: fs.watch on the semaphore's folder (../watch.ts): one watch per waiter on one folder per
 *   semaphore; every change of the state is a new generation, so a release, an abandon, a setLimit and a
 *   grant while others wait each wake them. Expiry writes nothing: a refusal says when the soonest lease ends.
 *
 *   index.ts    the facet
 *   records.ts  the record, its live view, and what the sweep asks of it
 *   update.ts   one change: read, decide, link the next generation
 */
import {
  type AcquireRequest,
  type AttemptResult,
  type ExtendResult,
  type LockInfo,
  placeKeptMs,
  type SemaphoreFacet,
  type SemaphoreInfo,
} from '../../../core/backend.js'
import { LimitMismatchError } from '../../../core/errors.js'
import { guarded } from '../errors.js'
import { monotonicMs } from '../host-clock.js'
import { innerRoot, innerRootMaker } from '../inner-root.js'
import type { FolderRetirer } from '../retire.js'
import { folderOf, type Root } from '../root.js'
import type { SweepTrigger } from '../sweep.js'
import { folderChanged } from '../watch.js'
import {
  heldOf,
  leaseCheckable,
  liveView,
  type Place,
  readSemaphore,
  type SemaphoreRecord,
} from './records.js'
import { type Draft, update, type SemaphoreWritten as Written } from './update.js'

export { SEMAPHORE_RECORDS } from './records.js'

/** The semaphores' root in a lock root: no key folder has this name (they all contain `~`). */
export const SEMAPHORE_FOLDER = '.semaphores'

/**
 * How soon a waiter refused by leases whose processes can be checked asks again: a holder's death writes
 * nothing a watch could see (the mutex's HOLDER_CHECK_MS).
 */
const HOLDER_CHECK_MS = 100

/** What the semaphores' housekeeping is told: idle folders (to retire) and changes (to sweep). */
export interface SemaphoreHousekeeping {
  readonly retirer: FolderRetirer
  /** Undefined when the backend never sweeps. */
  readonly sweeper: SweepTrigger | undefined
}

/** The semaphores' root of the lock root `root`: the same settings, its own folder and epochs. */
export function semaphoreRoot(root: Root, unreadableHoldMs: number): Root {
  return innerRoot(root, SEMAPHORE_FOLDER, unreadableHoldMs)
}

/**
 * The semaphores on `sems` (a `semaphoreRoot`) inside the lock root `top`; every operation's failure is
 * reported as `guarded` (../errors.ts) says.
 */
export function fileSemaphore(
  top: string,
  sems: Root,
  { retirer, sweeper }: SemaphoreHousekeeping,
  shell: Pick<SemaphoreFacet, 'id' | 'capabilities' | 'limits'>,
): SemaphoreFacet {
  const made = innerRootMaker(top, sems)
  /** A change left the semaphore idle: its folder goes once it stays so a while (../retire.ts). */
  const housekeep = (key: string, written: Written | undefined): void => {
    if (!written) return
    if (written.record.limit === null) retirer.released(folderOf(sems, key), written.gen, written.stamp)
    sweeper?.used()
  }

  const attempt = async (req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> => {
    const { key, owner, ttlMs, holder } = req
    const asked = req.semaphore
    if (!asked) throw new TypeError('A semaphore acquire carries `semaphore` (its limit and permits)')
    await made()
    // Deadlines count from before we look: never later than the lease the core believes in.
    const start = monotonicMs()
    const { answer, written } = await update<AttemptResult>(sems, key, folderOf(sems, key), {
      creates: true,
      signal,
      aborted: { granted: false },
      unreadable: (ms) => ({ granted: false, retryInMs: ms }),
      decide(view, gen) {
        // What this acquire has seen: its wake-up hint ignores events on generations up to this one.
        sems.seenBy.renew(owner, gen)
        const stored = view?.limit ?? null
        if (stored !== null && stored !== asked.limit && !asked.limitCompared) {
          throw new LimitMismatchError(stored, asked.limit, { key, backend: shell.id })
        }
        const limit = stored ?? asked.limit
        const leases = view?.leases ?? []
        const line = view?.line ?? []
        const mine = leases.find((lease) => lease.owner === owner)
        // An earlier attempt of this acquire won and its reply was lost: what is left of that lease is ours.
        if (mine) {
          const fence = BigInt(mine.sequence)
          return { done: { granted: true, fence, ttlMs: mine.deadline - monotonicMs() } }
        }
        const first = line[0]
        if (permitsOf(leases) + asked.permits <= limit && (!first || first.owner === owner)) {
          return {
            write: (sequence) => ({
              record: {
                limit,
                latest: sequence.toString(),
                leases: [
                  ...leases,
                  {
                    owner,
                    permits: asked.permits,
                    sequence: sequence.toString(),
                    deadline: start + ttlMs,
                    ...(holder === undefined ? {} : { holder }),
                    ...(sems.processes === undefined ? {} : { processes: sems.processes }),
                  },
                ],
                line: line.filter((place) => place.owner !== owner),
              },
              answer: { granted: true, fence: sequence, ttlMs },
            }),
          }
        }
        const busy = { granted: false, queued: true, ...retryOf(view, owner, sems.boot) } as const
        const keep = placeKeptMs(ttlMs)
        const place = line.find((p) => p.owner === owner)
        // A place kept long enough is not written again: each write wakes every waiter.
        if (place && stored !== null && place.keptUntil - monotonicMs() > keep / 2) return { done: busy }
        const kept: Place = { owner, permits: asked.permits, keptUntil: monotonicMs() + keep }
        const nextLine = place ? line.map((p) => (p === place ? kept : p)) : [...line, kept]
        return {
          write: () => ({ record: { limit, latest: view?.latest, leases, line: nextLine }, answer: busy }),
        }
      },
    })
    if (answer.granted) sems.seenBy.delete(owner)
    // Our own place written: not news to us.
    else if (written) sems.seenBy.renew(owner, written.gen)
    if (written && answer.granted) sweeper?.used()
    return answer
  }

  return {
    ...shell,

    tryAcquire: (req, signal) => guarded(sems, req.key, 'acquire permits', () => attempt(req, signal)),

    extend: (lease, ttlMs) =>
      guarded(sems, lease.key, 'extend permits', async () => {
        const start = monotonicMs()
        const { answer } = await update<ExtendResult>(sems, lease.key, folderOf(sems, lease.key), {
          creates: false,
          unreadable: () => ({ renewed: false }),
          decide(view) {
            const mine = view?.leases.find(
              (l) => l.owner === lease.owner && BigInt(l.sequence) === lease.fence,
            )
            if (!view || !mine) return { done: { renewed: false } }
            const renewed = { ...mine, deadline: start + ttlMs }
            const leases = view.leases.map((l) => (l === mine ? renewed : l))
            return { write: () => ({ record: { ...draftOf(view), leases }, answer: { renewed: true } }) }
          },
        })
        return answer
      }),

    release: (lease) =>
      guarded(sems, lease.key, 'release permits', async () => {
        const { answer, written } = await update<boolean>(sems, lease.key, folderOf(sems, lease.key), {
          creates: false,
          unreadable: () => false,
          decide(view) {
            const mine = view?.leases.find(
              (l) => l.owner === lease.owner && BigInt(l.sequence) === lease.fence,
            )
            if (!view || !mine) return { done: false }
            const record = without(view, lease.owner)
            return { write: () => ({ record, answer: true }) }
          },
        })
        housekeep(lease.key, written)
        return answer
      }),

    abandon: ({ key, owner }) =>
      guarded(sems, key, 'abandon an acquire of permits', async () => {
        sems.seenBy.delete(owner) // The acquire has ended: its hint is no longer armed.
        // Owner-checked: only what this acquire holds or where it waits.
        const { written } = await update<void>(sems, key, folderOf(sems, key), {
          creates: false,
          unreadable: () => undefined,
          decide(view) {
            const present =
              view?.leases.some((l) => l.owner === owner) || view?.line.some((p) => p.owner === owner)
            if (!view || !present) return { done: undefined }
            const record = without(view, owner)
            return { write: () => ({ record, answer: undefined }) }
          },
        })
        housekeep(key, written)
      }),

    inspect: (key) =>
      guarded(sems, key, 'inspect', async (): Promise<LockInfo | null> => {
        const view = await liveRecord(sems, key)
        if (view === 'unreadable') return { held: true }
        if (!view?.latest) return null
        return { held: view.leases.length > 0, fence: BigInt(view.latest) }
      }),

    holders: (key) =>
      guarded(sems, key, 'inspect', async (): Promise<SemaphoreInfo | null> => {
        const view = await liveRecord(sems, key)
        if (view === undefined || view === 'unreadable' || view.limit === null) return null
        const t = monotonicMs()
        return {
          limit: view.limit,
          held: heldOf(view),
          holders: view.leases.map((lease) => ({
            owner: lease.owner,
            ...(lease.holder === undefined ? {} : { holder: lease.holder }),
            permits: lease.permits,
            sequence: BigInt(lease.sequence),
            expiresInMs: Math.floor(lease.deadline - t),
          })),
          waiting: view.line.length,
        }
      }),

    setLimit: (key, limit) =>
      guarded(sems, key, 'set the limit', async () => {
        await made()
        const { written } = await update<void>(sems, key, folderOf(sems, key), {
          creates: true,
          unreadable: () => {
            throw new Error('its record is unreadable; remove its folder or wait for it to count as expired')
          },
          // Always a new generation, even with the same limit: it wakes the waiters.
          decide: (view) => ({
            write: () => ({
              record: { ...(view ? draftOf(view) : { leases: [], line: [] }), limit },
              answer: undefined,
            }),
          }),
        })
        housekeep(key, written)
      }),

    waitForChange: ({ key, owner }, signal) =>
      folderChanged(folderOf(sems, key), signal, () => sems.seenBy.get(owner)),
  }
}

/** The permits `leases` hold. */
const permitsOf = (leases: SemaphoreRecord['leases']): number => leases.reduce((sum, l) => sum + l.permits, 0)

/** A live record's fields as a change writes them on. */
const draftOf = (view: SemaphoreRecord): Draft => ({
  limit: view.limit,
  latest: view.latest,
  leases: view.leases,
  line: view.line,
})

/** `view` without the lease and the place of `owner`; with no limit once nothing holds or waits. */
function without(view: SemaphoreRecord, owner: string): Draft {
  const leases = view.leases.filter((l) => l.owner !== owner)
  const line = view.line.filter((p) => p.owner !== owner)
  const idle = leases.length === 0 && line.length === 0
  return { limit: idle ? null : view.limit, latest: view.latest, leases, line }
}

/** When a refused waiter should look again at the latest: the soonest lease end, or place lapse ahead of it. */
function retryOf(view: SemaphoreRecord | undefined, owner: string, boot: string): { retryInMs?: number } {
  if (!view) return {}
  const t = monotonicMs()
  let soonest = Number.POSITIVE_INFINITY
  for (const lease of view.leases) {
    soonest = Math.min(soonest, lease.deadline - t)
    if (leaseCheckable(lease, view.boot, boot)) soonest = Math.min(soonest, HOLDER_CHECK_MS)
  }
  const first = view.line[0]
  if (first && first.owner !== owner) soonest = Math.min(soonest, first.keptUntil - t)
  return soonest === Number.POSITIVE_INFINITY ? {} : { retryInMs: Math.max(0, Math.ceil(soonest)) }
}

/** The live view of the semaphore `key`, 'unreadable', or undefined when nothing is kept. */
async function liveRecord(sems: Root, key: string): Promise<SemaphoreRecord | 'unreadable' | undefined> {
  const current = await readSemaphore(folderOf(sems, key))
  if (current.record === 'none') return undefined
  if (current.record === 'unreadable') return current.record
  return liveView(current.record, sems.boot)
}
