/**
 * The sweep: removing key folders nobody will release or retire (retire.ts removes only this process's
 * own releases), so the lock root keeps a folder per lock held or recently held: a crashed or killed
 * process's lease (its processes gone, or its ttl passed), an abandoned one, a broken lock's free record,
 * a folder a failed removal left empty, a process's releases it had no time to retire.
 *
 * Which folder goes (`sweepFolder`): one whose state has ENDED at least `afterMs` ago and that nobody is
 * in. Ended: a free record (its file's age: written by a release, an abandon or a break), a lease past its
 * deadline (by the monotonic clock) or of another boot, a lease whose processes are all certainly gone
 * (holders.ts; the age of its last renewal). Never a live lease, however old, nor an unreadable record
 * (it counts as held, as attempts count it), nor a folder with another writer's temp file in it.
 * The removal is retire.ts's `retireFolder`, unchanged: pin, list (our pin and the record, nothing else),
 * the one stat that the name is still the file read, unlink, rmdir. So a removal never lets a fence go back
 * nor grants twice, for the same reasons (docs/backends/file.md has the whole argument): the next grant of the key
 * finds no generation and takes a fresh epoch, after the removal, above every fence of the key (a process
 * that started the folder with its current epoch remembers it and takes a new one: epochs.ts,
 * `startAgain`). Removing an ended lease is no more than what a waiter's take-over does to it: its holder,
 * if it still runs (paused), finds its record gone at its next renewal or release, as it would find a
 * successor. `afterMs` only keeps a folder in use from being removed and made again (each new start costs
 * an epoch bump); correctness does not rest on it. Older generations and a crashed writer's stale temp
 * files are collected first, as any transition does.
 *
 * When (`RootSweeper`): after a grant or a release, at most once per `everyMs` per backend, off that call (one
 * setImmediate, hence this file's one timer: no engine sweeps a folder), one pass over at most BATCH
 * entries of the root, from a listing kept open between passes, so that a root of millions of folders
 * costs each pass the same few milliseconds and every folder is looked at once per round of the listing.
 * `fencelock prune` runs the same test over the whole root at once, for ended states of any age.
 */
import { type Dir, opendirSync, rmdirSync, statSync } from 'node:fs'
import { opendir } from 'node:fs/promises'
import { join } from 'node:path'
import { now } from '../../core/clock.js'
import { type Current, collect, readCurrent, type Stamp } from './generations.js'
import { monotonicMs, sameBoot } from './host-clock.js'
import { holderGone, isLive, type RecordV1 } from './records.js'
import { retireFolder } from './retire.js'
import type { Root } from './root.js'

/** How long after its state ended a folder may be swept (a holder's late release or renewal, a key reused soon). */
export const DEFAULT_SWEEP_AFTER_MS = 60_000
/** How often one backend sweeps at most (after a grant or a release). */
export const DEFAULT_SWEEP_EVERY_MS = 1_000
/** Root entries one pass looks at: about 30 µs each (a listing of the folder and a read of its record). */
const BATCH = 64

/**
 * For tests only: the sweep's `afterMs` and `everyMs` for every file backend made in a process that sees
 * this variable (the chaos workers sweep with 0: at every grant, whatever just ended).
 * @internal
 */
export const TEST_SWEEP_MS = 'FENCELOCK_TEST_FILE_SWEEP_MS'

/** What a key folder's state is, for the sweep and for `doctor`. */
export type FolderState =
  /** A live lease (or an unreadable record, which counts as one). */
  | { readonly kind: 'held' }
  /** Ended `endedMs` ago: free, expired, of another boot, or its processes gone. */
  | { readonly kind: 'ended'; readonly endedMs: number; readonly gen: bigint; readonly stamp: Stamp }
  /** No generation: a new folder, or one a removal left empty. */
  | { readonly kind: 'empty' }

/** The state `current` (a read of a key folder) is in. */
export function stateOf(root: Root, current: Current): FolderState {
  if (current.record === 'none') return { kind: 'empty' }
  if (current.record === 'unreadable') return { kind: 'held' }
  const { gen, stamp } = current
  const endedMs = endedFor(root, current.record, ageOf(stamp.mtimeNs))
  return endedMs === undefined ? { kind: 'held' } : { kind: 'ended', endedMs, gen, stamp }
}

/** The age of a file by its mtime, in ms of the wall clock (the file's own clock: all we have). */
const ageOf = (mtimeNs: bigint): number => Date.now() - Number(mtimeNs / 1_000_000n)

/** How long ago `record`'s lease ended, its file written `age` ms ago; undefined while it is live. */
function endedFor(root: Root, record: RecordV1, age: number): number | undefined {
  if (record.state === 'free') return age
  if (!isLive(record, root.boot)) {
    // Its deadline is on this boot's monotonic clock; another boot's ended at that boot's end, before now.
    return sameBoot(record.boot, root.boot) ? Math.min(age, monotonicMs() - record.deadline) : age
  }
  // Its processes died after its last write (a grant or a renewal): at most that long ago.
  return holderGone(record, root.boot) ? age : undefined
}

/**
 * What `sweepFolder` did: removed the folder; left a live lease (`held`); left a folder it may not remove
 * yet (`kept`: ended lately, or another writer in it); or left one that is not its to judge (`other`:
 * gone already, or a key outside `prefix`).
 */
export type SweepOutcome = 'removed' | 'held' | 'kept' | 'other'

/**
 * Removes the key folder `folder` if its state ended `afterMs` ago or more and nobody is in it (see the
 * header), only for a key starting with `prefix` (an empty folder names no key: only with no prefix).
 * Every failure leaves the folder as it is.
 */
export async function sweepFolder(
  root: Root,
  folder: string,
  afterMs: number,
  prefix = '',
): Promise<SweepOutcome> {
  const current = await readCurrent(folder)
  if (current.record === 'none') {
    if (current.missing || prefix !== '') return 'other'
    // A crashed writer's stale temp files go, as any transition collects them; a folder in use by a
    // writer (its fresh temp file) or changed lately stays.
    collect(folder, 0n, current.names)
    const changed = statSync(folder, { bigint: true, throwIfNoEntry: false })
    if (!changed) return 'other'
    if (ageOf(changed.mtimeNs) < afterMs) return 'kept'
    try {
      rmdirSync(folder)
      return 'removed'
    } catch {
      return 'kept' // Not empty: a writer is in it. It stays, and is used as it is.
    }
  }
  if (current.record !== 'unreadable' && !current.record.key.startsWith(prefix)) return 'other'
  const state = stateOf(root, current)
  if (state.kind === 'held') return 'held'
  if (state.kind !== 'ended' || state.endedMs < afterMs) return 'kept'
  // Generations below the state and stale temp files: what the transition that wrote it collects.
  collect(folder, state.gen, current.names)
  return retireFolder(folder, state.gen, state.stamp) ? 'removed' : 'kept'
}

/** What `prune` found: folders removed, live leases left, folders left for now (someone is in them). */
export interface PruneResult {
  readonly removed: number
  readonly held: number
  readonly kept: number
}

/**
 * Removes, now, every key folder of the root under `prefix` whose state has ended, whatever its age
 * (`fencelock prune`): what the background sweep does a little at a time, for ended states a minute old.
 */
export async function prune(root: Root, prefix: string): Promise<PruneResult> {
  const listing = await opendir(root.dir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined // No root yet: nothing kept.
    throw error
  })
  const counts = { removed: 0, held: 0, kept: 0, other: 0 }
  if (!listing) return counts
  for await (const entry of listing) {
    if (!entry.name.includes('~') || !entry.isDirectory()) continue
    counts[await sweepFolder(root, join(root.dir, entry.name), 0, prefix)]++
  }
  return { removed: counts.removed, held: counts.held, kept: counts.kept }
}

/** A backend's background sweep of its root (see the header). */
export class RootSweeper {
  readonly #root: Root
  readonly #afterMs: number
  readonly #everyMs: number
  /** The root's listing, kept open from one pass to the next; undefined at the start of a round. */
  #listing: Dir | undefined
  #lastAt = Number.NEGATIVE_INFINITY
  #scheduled: NodeJS.Immediate | undefined
  #closed = false

  constructor(root: Root, afterMs: number, everyMs: number) {
    this.#root = root
    this.#afterMs = afterMs
    this.#everyMs = everyMs
  }

  /** A grant or a release was made: a pass follows, off this call, unless one ran within `everyMs`. */
  used(): void {
    if (this.#closed || this.#scheduled !== undefined || now() - this.#lastAt < this.#everyMs) return
    this.#lastAt = now()
    this.#scheduled = setImmediate(() => {
      this.#scheduled = undefined
      // A failure here (a folder another user made unreadable) is the next pass's to meet again: the
      // sweep only saves space, and a grant's caller has its answer already.
      this.pass().catch(() => {})
    })
    this.#scheduled.unref()
  }

  /** One pass: at most BATCH entries of the root, from where the last pass stopped; how many folders went. */
  async pass(): Promise<number> {
    let removed = 0
    for (let seen = 0; seen < BATCH && !this.#closed; seen++) {
      this.#listing ??= openRoot(this.#root.dir)
      const entry = this.#listing?.readSync()
      if (!entry) {
        this.#endRound()
        break
      }
      // Key folders are the only entries with a `~` in their name (`.epoch`, `.boot` and temp names have none).
      if (!entry.name.includes('~') || !entry.isDirectory()) continue
      const outcome = await sweepFolder(this.#root, join(this.#root.dir, entry.name), this.#afterMs)
      if (outcome === 'removed') removed++
    }
    return removed
  }

  close(): void {
    this.#closed = true
    if (this.#scheduled !== undefined) clearImmediate(this.#scheduled)
    this.#scheduled = undefined
    this.#endRound()
  }

  #endRound(): void {
    try {
      this.#listing?.closeSync()
    } catch {}
    this.#listing = undefined
  }
}

/** The root's listing; undefined when there is no root yet. */
function openRoot(dir: string): Dir | undefined {
  try {
    return opendirSync(dir)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw error
  }
}

/** The sweep's settings from the test variable (`TEST_SWEEP_MS`), if set. */
export function testSweepMs(): number | undefined {
  const value = process.env[TEST_SWEEP_MS]
  return value === undefined || value === '' ? undefined : Number(value)
}
