/**
 * The lock root's epoch counter: `<root>/.epoch/`, a generation store of its own whose highest name is the
 * latest epoch issued. An epoch is taken whenever a key folder must start a fence range afresh (a new or
 * removed folder, an unreadable record, a range used up): the range of epoch E is (E·2^21, (E+1)·2^21), so
 * every fence minted in it is above every fence of an earlier epoch. See index.ts for the argument.
 *
 * A new epoch is also at least the wall clock in ms. That is what keeps fences rising when the counter
 * itself is lost: a lock root on tmpfs (/run/lock, /var/lock, /tmp on many systems) after a reboot, or a
 * tmp cleaner that removed an idle `.epoch`. Epochs issued before were at most the clock of their time
 * plus one per bump made within the same ms, so after any loss that took longer than that lead (a reboot
 * takes seconds; a run-ahead needs thousands of new keys per second, sustained), the clock is past them.
 * It fails only if the wall clock is set back across such a loss.
 */
import { mkdirSync, readdirSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { join } from 'node:path'
import { retryRounds } from '../../core/retry.js'
import { collect, createGeneration, highest } from './generations.js'

/** The epochs' folder in the lock root. Its name has no `~`, so no key folder can ever be called that. */
export const EPOCH_FOLDER = '.epoch'

/**
 * Fences per epoch. Epochs are ms of the wall clock (or a little above, see the header): 2^42 ms reach the
 * year 2109, and 2^42 epochs of 2^21 fences stay below 2^63, where a SQL `bigint` column holds them. A key
 * that makes 2^21 transitions in one range (a lock renewed every 10 s for eight months) simply takes a new
 * epoch.
 */
export const RANGE = 2n ** 21n

/** How many rounds one bump makes (each lost to another bumper, or to a removed folder) before it gives up. */
const BUMP_TRIES = 50

/** The epoch whose range holds `fence`. */
export const epochOf = (fence: bigint): bigint => fence / RANGE

/** The base that makes generation `gen` the first fence of epoch `epoch`'s range: epoch·2^21 + 1. */
export const baseFor = (epoch: bigint, gen: bigint): bigint => epoch * RANGE + 1n - gen

/** The latest epoch issued in `root`, 0 when none (a new root, or one whose `.epoch` was removed). */
export function currentEpoch(root: string): bigint {
  try {
    return highest(readdirSync(join(root, EPOCH_FOLDER)))
  } catch {
    return 0n
  }
}

/**
 * Issues a new epoch: one greater than every epoch issued before in this root, and than `floor`, and at
 * least the wall clock in ms (`clock`, for tests; see the header for why). Several
 * processes may bump at once: each links the name `latest + 1` (a compare-and-swap, as for generations);
 * the loser of a race re-reads and tries the next name. With `durable`, the new name is on disk before
 * this returns: a power loss must never let the same epoch be issued twice.
 */
export function bumpEpoch(
  root: string,
  floor: bigint,
  durable: boolean,
  clock: () => number = Date.now,
): Promise<bigint> {
  const folder = join(root, EPOCH_FOLDER)
  return retryRounds(
    BUMP_TRIES,
    () => bumpOnce(root, folder, floor, durable, clock),
    () =>
      new Error(
        `could not take a new fence epoch in ${folder} after ${BUMP_TRIES} tries: too many processes at once`,
      ),
  )
}

/** One round of `bumpEpoch`: the epoch issued, or undefined when another bumper took the name first. */
async function bumpOnce(
  root: string,
  folder: string,
  floor: bigint,
  durable: boolean,
  clock: () => number,
): Promise<bigint | undefined> {
  let names: string[]
  try {
    names = readdirSync(folder)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    await makeFolder(root, folder, durable)
    return undefined
  }
  const latest = highest(names)
  const wall = BigInt(Math.floor(clock())) - 1n
  const below = [latest, floor, wall].reduce((a, b) => (a > b ? a : b))
  const next = below + 1n
  let created: boolean
  try {
    // Exclusive: link() of name `next` succeeds for one bumper only, and the check after it (no higher
    // name) refuses a name that was issued, superseded and collected before (ABA). The highest name is
    // never collected, so an issued epoch is never issued again.
    created = await createGeneration(folder, next, { epoch: next.toString() }, durable)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    return undefined // The folder went away between the list and the write: make it again.
  }
  if (!created) return undefined
  await collect(folder, next, names)
  return next
}

/**
 * The base for generation `gen` succeeding a state of base `base`: the same one (fences go on from it),
 * or a new epoch's when there is none to go on from or the range is used up. A new epoch is only ever
 * taken after the read that found the state, so it exceeds every epoch of every fence minted before.
 */
export async function nextBase(
  root: string,
  durable: boolean,
  base: bigint | undefined,
  gen: bigint,
): Promise<bigint> {
  if (base !== undefined && (base + gen) % RANGE !== 0n) return base
  const floor = base === undefined ? 0n : epochOf(base + gen - 1n)
  return baseFor(await bumpEpoch(root, floor, durable), gen)
}

/** Creates `.epoch`; with `durable`, its name in the root is on disk too (else a power loss could drop it). */
async function makeFolder(root: string, folder: string, durable: boolean): Promise<void> {
  mkdirSync(folder, { recursive: true })
  if (!durable) return
  const handle = await open(root, 'r')
  try {
    await handle.sync()
  } finally {
    await handle.close()
  }
}
