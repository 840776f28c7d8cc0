/** `breakLock` of the mutex: a free record written over whatever a key holds, whoever holds it. */
import type { BreakResult } from '../../../core/backend.js'
import { retryRounds } from '../../../core/retry.js'
import { nextBase } from '../epochs.js'
import { collect, createGeneration } from '../generations.js'
import { folderOf, type Root } from '../root.js'
import { carriedBase, freeRecord, holderGone, isLive, readCurrent } from './records.js'

/** How many rounds `breakLock` makes; each round loses only to another writer's transition. */
const BREAK_ROUNDS = 100

/** Writes a free record over whatever `key` holds, in bounded rounds (the core's `retryRounds`). */
export async function breakLock(
  root: Root,
  key: string,
  onlyFence: bigint | undefined,
): Promise<BreakResult> {
  return retryRounds(
    BREAK_ROUNDS,
    () => breakOnce(root, key, onlyFence),
    () => new Error(`the lock kept changing under ${BREAK_ROUNDS} attempts to break it`),
  )
}

/**
 * One round of `breakLock`: what it did, or undefined when another writer's transition got in first. An
 * unreadable record counts as held (as attempts count it) and is broken unless a fence was asked for.
 */
async function breakOnce(
  root: Root,
  key: string,
  onlyFence: bigint | undefined,
): Promise<BreakResult | undefined> {
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none') return { broken: false }
  const known = current.record === 'unreadable' ? undefined : current.record
  if (known && (!isLive(known, root.boot) || holderGone(known, root.boot))) return { broken: false }
  const lease = known && { owner: known.owner ?? '', fence: BigInt(known.fence), holder: known.holder }
  if (onlyFence !== undefined && lease?.fence !== onlyFence) return { broken: false, lease }
  const gen = current.gen + 1n
  const base = await nextBase(root, known ? carriedBase(root, known) : undefined, gen, folder)
  const fence = known ? BigInt(known.fence) : 0n
  const names = await createGeneration(
    folder,
    gen,
    freeRecord(key, fence, base, root.boot),
    undefined,
    current.stamp,
  ).catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'gone' as const
    throw error
  })
  if (names === 'gone') return { broken: false } // The folder went with its last lease: nothing held.
  if (!names) return undefined
  collect(folder, gen, names)
  return { broken: true, lease }
}
