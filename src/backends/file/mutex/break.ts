/** `breakLock` of the mutex: a free record written over whatever a key holds, whoever holds it. */
import type { BreakResult } from '../../../core/backend.js'
import { retryRounds } from '../../../core/retry.js'
import { nextBase } from '../epochs.js'
import { collect, pendingIn } from '../generations.js'
import { folderOf, type Root } from '../root.js'
import { carriedBase, freeRecord, holderGone, isLive, readCurrent } from './records.js'

/** How many rounds `breakLock` makes; each round loses only to another writer's transition. */
const BREAK_ROUNDS = 100

type Lease = NonNullable<BreakResult['lease']>

/**
 * What the rounds of one break have learnt. `lease`: the grant the first round found, the only one the break
 * may end (a grant that follows it is someone's fresh lock, never the stuck one the operator meant).
 * `linked`: a round's free record was linked over that grant but a higher generation was there at once, so
 * it may have been the state, with a waiter's grant built on it.
 */
interface Aim {
  found: boolean
  lease: Lease | undefined
  linked: boolean
}

/** Writes a free record over the grant `key` holds, in bounded rounds (the core's `retryRounds`). */
export async function breakLock(
  root: Root,
  key: string,
  onlyFence: bigint | undefined,
): Promise<BreakResult> {
  const aim: Aim = { found: false, lease: undefined, linked: false }
  return retryRounds(
    BREAK_ROUNDS,
    () => breakOnce(root, key, onlyFence, aim),
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
  aim: Aim,
): Promise<BreakResult | undefined> {
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none') return endedAfter(aim)
  const known = current.record === 'unreadable' ? undefined : current.record
  const held = !known || (isLive(known, root.boot) && !holderGone(known, root.boot))
  const lease = known && { owner: known.owner ?? '', fence: BigInt(known.fence), holder: known.holder }
  const same = held && isAimedAt(aim, onlyFence, lease)
  if (!same) return aim.linked || !held ? endedAfter(aim) : { broken: false, lease }
  if (!aim.found) Object.assign(aim, { found: true, lease })
  // The aimed grant is still the state: no earlier link of ours ended it.
  aim.linked = false
  const gen = current.gen + 1n
  const base = await nextBase(root, known ? carriedBase(root, known) : undefined, gen, folder)
  const pending = pendingIn(folder)
  if (!pending) return endedAfter(aim) // The folder went with its last lease: nothing held.
  try {
    await pending.write(freeRecord(key, known ? BigInt(known.fence) : 0n, base, root.boot), undefined)
    const names = await pending.commit(gen, undefined, current.stamp)
    if (!names) {
      aim.linked ||= pending.linked
      return undefined
    }
    collect(folder, gen, names)
    return { broken: true, lease }
  } finally {
    pending.discard()
  }
}

/**
 * The answer once the aimed grant is no longer the state: broken when a round's free record was linked
 * over it (it may have been the state, a waiter's grant built on it), else it ended by itself.
 */
const endedAfter = (aim: Aim): BreakResult =>
  aim.linked ? { broken: true, lease: aim.lease } : { broken: false }

/**
 * Whether a held state (`lease`; undefined: an unreadable record) is the grant this break may end: the one
 * its first round found, or, in the first round, any grant (with `onlyFence`, that grant only).
 */
function isAimedAt(aim: Aim, onlyFence: bigint | undefined, lease: Lease | undefined): boolean {
  if (!aim.found) return onlyFence === undefined || lease?.fence === onlyFence
  return aim.lease === undefined ? lease === undefined : lease?.fence === aim.lease.fence
}
