/**
 * Removing the key folders this process stopped using, so that the lock root keeps a folder per lock in
 * use or recently released, not one per name ever locked (each costs 2 inodes and 8 KiB).
 *
 * A key folder is removed `afterMs` after this process's last release in it, unless its state has moved
 * on since: a lock taken over and over keeps its folder (removing it at each release would make each next
 * acquire start a fresh fence range, and a key this process started with its current epoch needs a new
 * epoch for that: a bump, and a wait for the clock). `close()` removes every folder remembered at once.
 *
 * Why a removal never lets a fence go back, nor grants twice (docs/backends/file.md has the whole argument):
 *   - Only our own free record is removed: the folder is pinned first (a temp file), and the one stat of
 *     `holds` says its name N is still the very file our release wrote. So nobody holds the key.
 *   - The folder's listing, taken after the pin, must hold nothing else: no other generation (a stale one
 *     below N, exposed, would hand its old fence on) and no other temp file (a writer between its pin and
 *     its link). A writer arriving later pins after that listing and reads N, or nothing: one that links
 *     N+1 after our unlink finds its predecessor gone and stands back (`afterLink`, 'orphaned'); one that
 *     finds no generation starts a fresh range, whose epoch is taken after this removal, so its fences
 *     exceed every fence of the key (a process that started this folder with its current epoch remembers
 *     it, and takes a new one: epochs.ts, `startAgain`). Below N nothing can appear: a link needs its
 *     predecessor in place.
 *   - The folder itself goes with rmdir, which fails while anyone's file is in it: then it stays, empty
 *     or holding a new state, and is used as it is.
 * What it leaves: a folder whose removal failed (empty, one inode), a folder with a crashed writer's temp
 * file (until a transition collects it), the folders of a process that crashed or was killed before
 * `afterMs`. `doctor` counts the folders kept. The timer's removals go a slice at a time (SLICE_MS), so a
 * burst of them never stalls the process.
 *
 * The unlink follows the stat of `holds` at once, on the same thread: for the name N to be another file
 * between the two, our record would have to be superseded, the folder emptied by another removal and
 * advanced again to N, all between two system calls. Its one timer lives here rather than in an engine
 * because no other store needs it (like the ZooKeeper backend's retire.ts).
 */
import { readdirSync, rmdirSync, unlinkSync } from 'node:fs'
import { sep } from 'node:path'
import { now, timerDelay } from '../../core/clock.js'
import { genName, Pending, type Stamp } from './generations.js'
import { KEY_FOLDERS_REMEMBERED } from './root.js'

/**
 * Released folders remembered at most: past it, the oldest is retired at once. As many as the table of
 * this process's last writes keeps (mutex/written.ts): a smaller bound removed folders of keys still in
 * use on the hot path (8 workers over 10,000 keys re-created 3,000 folders per 20,000 cycles).
 */
const MAX_REMEMBERED = KEY_FOLDERS_REMEMBERED

/** How long a released key folder stays before it is removed, unless the key was used again. */
export const DEFAULT_RETIRE_AFTER_MS = 10_000

/**
 * The most time one turn of the event loop spends removing folders before it yields: each removal is a
 * few synchronous metadata calls, and on a disk busy with other writes each can take milliseconds, so
 * the thousands released together by a burst of new keys would otherwise stall the process for seconds
 * (seen: 28 s, and acquires of other keys failing meanwhile).
 */
const SLICE_MS = 5

/** Our free record in a folder: its generation and the stamp of its file. */
interface Released {
  readonly gen: bigint
  readonly stamp: Stamp
  readonly at: number
}

export class FolderRetirer {
  readonly #afterMs: number
  /** When a release happened and which are due: the monotonic clock, or a test's. */
  readonly #clock: () => number
  /** Key folders by path, oldest release first (a Map keeps insertion order). */
  readonly #released = new Map<string, Released>()
  #timer: NodeJS.Timeout | undefined

  constructor(afterMs: number, clock: () => number = now) {
    this.#afterMs = afterMs
    this.#clock = clock
  }

  /** How many released folders wait for their removal. */
  get size(): number {
    return this.#released.size
  }

  /** This process released its lease in `folder` as generation `gen` (the file of `stamp`). */
  released(folder: string, gen: bigint, stamp: Stamp): void {
    if (this.#afterMs === Number.POSITIVE_INFINITY) return // Never: keeps every folder (tests).
    this.#released.delete(folder)
    this.#released.set(folder, { gen, stamp, at: this.#clock() })
    if (this.#released.size > MAX_REMEMBERED) {
      const [oldest, entry] = this.#released.entries().next().value!
      this.#released.delete(oldest)
      retireFolder(oldest, entry.gen, entry.stamp)
    }
    this.#arm()
  }

  /**
   * Removes every remembered folder still in the state we left it in, now, in one go: the client is
   * closing, and what it leaves would wait for another process's sweep.
   */
  close(): void {
    clearTimeout(this.#timer)
    this.#timer = undefined
    for (const [folder, { gen, stamp }] of this.#released) retireFolder(folder, gen, stamp)
    this.#released.clear()
  }

  #arm(): void {
    if (this.#timer !== undefined) return
    const first = this.#released.values().next().value
    if (!first) return
    this.#timer = setTimeout(() => this.#sweep(), timerDelay(first.at + this.#afterMs - this.#clock()))
    this.#timer.unref()
  }

  #sweep(): void {
    this.#timer = undefined
    const due = this.#clock() - this.#afterMs
    const until = now() + SLICE_MS
    for (const [folder, { gen, stamp, at }] of this.#released) {
      if (at > due) break
      if (now() >= until) {
        // The rest in a later turn, after whatever else is waiting (an acquire's attempt, its timers).
        this.#timer = setTimeout(() => this.#sweep(), 0)
        this.#timer.unref()
        return
      }
      this.#released.delete(folder)
      retireFolder(folder, gen, stamp)
    }
    this.#arm()
  }
}

/**
 * Removes `folder` if its state is still our free record `gen` (the file of `stamp`) and nothing else is
 * in it (see the header); true when the folder is gone. Every failure leaves it as it is.
 */
export function retireFolder(folder: string, gen: bigint, stamp: Stamp): boolean {
  let pin: Pending
  try {
    pin = new Pending(folder)
  } catch {
    return false // Gone already, or not ours to write in.
  }
  try {
    const names = readdirSync(folder)
    // Our record and our pin, nothing else: no other writer is between its pin and its link.
    if (names.length !== 2 || !names.includes(genName(gen))) return false
    if (!pin.holds(gen, stamp)) return false
    unlinkSync(`${folder}${sep}${genName(gen)}`)
  } catch {
    return false
  } finally {
    pin.discard()
  }
  try {
    rmdirSync(folder)
    return true
  } catch {
    return false // Someone pinned it meanwhile: it stays, and is used as it is.
  }
}
