/**
 * Every change of a semaphore is one compare-and-swap on its folder, the generation store's (../generations.ts):
 * read the state N, decide, write the whole new record to a temp file that pins the folder, and link() it
 * as generation N+1, which only one writer of all that read N wins (and only while N is still the very
 * file read). So a grant counts the permits of exactly the record it succeeds: at most `limit` are held by
 * live leases at any moment, whoever writes at the same time, from any process of the host.
 *
 * The sequence of a generation g is `base + g`, the base going on from the record read (when it was
 * written in this boot) or a fresh epoch's (../epochs.ts, `nextBase`): after a new or removed folder, an
 * unreadable record, a record of another boot. So sequences only grow, also after the folder was retired.
 *
 * A writer that lost the race reads again and decides again, at once: not a retry of a failure but the next
 * state, as the mutex's acquire does (its READ_ROUNDS), bounded, with no wait.
 */
import { nextBase } from '../epochs.js'
import { createFolder } from '../folders.js'
import { type Current, collect, type Pending, pendingIn, type Stamp } from '../generations.js'
import { sameBoot } from '../host-clock.js'
import { grantFlush, type Root } from '../root.js'
import { liveView, readSemaphore, type SemaphoreRecord } from './records.js'

/** What a change writes: the record's own fields (the rest is filled in here). */
export type Draft = Pick<SemaphoreRecord, 'limit' | 'leases' | 'line'> & {
  readonly latest?: string | undefined
}

/**
 * What a change decides on the live view of the state it read (undefined: none kept): an answer without a
 * write, or a write, given the sequence of the generation it would be, and the answer once it stands.
 */
export type Step<T> =
  | { readonly done: T }
  | { readonly write: (sequence: bigint) => { readonly record: Draft; readonly answer: T } }

/** The generation a change wrote: the record, its file, and the folder's state it leaves. */
export interface Written {
  readonly gen: bigint
  readonly stamp: Stamp
  readonly record: SemaphoreRecord
}

export interface Change<T> {
  /** Whether the change makes the folder when missing (an acquire, setLimit); others find nothing to change. */
  readonly creates: boolean
  /** The answer when the state is an unreadable record still counting as held for `ms`. */
  readonly unreadable: (ms: number) => T
  /** The decision on the state read, generation `gen` (0: none). */
  readonly decide: (view: SemaphoreRecord | undefined, gen: bigint) => Step<T>
  /** The caller stopped waiting: write nothing (its answer would never be read). */
  readonly signal?: AbortSignal | undefined
  /** The answer when `signal` aborted before the write. */
  readonly aborted?: T
}

/**
 * How many reads one change makes at most: each after a writer that got in between our read and our link.
 * The writers of one semaphore link in microseconds; losing this many times in a row means a store
 * changing faster than it can be followed, reported as an outage the core may retry.
 */
const ROUNDS = 16

/** Applies `change` to the semaphore `key` in `folder`: its answer, and the generation written, if any. */
export async function update<T>(
  root: Root,
  key: string,
  folder: string,
  change: Change<T>,
): Promise<{ readonly answer: T; readonly written?: Written }> {
  for (let round = 0; round < ROUNDS; round++) {
    const result = await once(root, key, folder, change)
    if (result) return result
  }
  throw new Error(`the semaphore's record changed under ${ROUNDS} writes in a row; try again`)
}

/** One read, decision and link; undefined when another writer (or a removal) got in between. */
async function once<T>(
  root: Root,
  key: string,
  folder: string,
  change: Change<T>,
): Promise<{ readonly answer: T; readonly written?: Written } | undefined> {
  let pending: Pending | undefined
  try {
    let current: Current<SemaphoreRecord> = await readSemaphore(folder)
    if (current.record === 'none') {
      if (!change.creates) return { answer: decided(change.decide(undefined, 0n)) }
      // A new semaphore, or its folder removed: (re)make it, pin it, then read it again, so that what we
      // decide is decided on the folder our link lands in, and a fresh epoch is taken after any removal.
      const made = current.missing && createFolder(folder, root.shared) !== undefined
      pending = pendingIn(folder)
      if (!pending) return undefined
      if (!made) {
        current = await readSemaphore(folder)
        if (current.record === 'none' && current.missing) return undefined
      }
    }
    let view: SemaphoreRecord | undefined
    let carried: bigint | undefined
    if (current.record === 'unreadable') {
      const remaining = root.unreadable.remainingMs(folder, current.gen)
      if (remaining > 0) return { answer: change.unreadable(remaining) }
    } else if (current.record !== 'none') {
      view = liveView(current.record, root.boot)
      carried = carriedBase(root, current.record)
    }
    const step = change.decide(view, current.gen)
    if ('done' in step) return { answer: step.done }
    pending ??= pendingIn(folder)
    if (!pending) return undefined
    const gen = current.gen + 1n
    const base = await nextBase(root, carried, gen, folder)
    const { record: draft, answer } = step.write(base + gen)
    if (change.signal?.aborted) return { answer: change.aborted as T }
    const record: SemaphoreRecord = {
      v: 1,
      kind: 'semaphore',
      key,
      limit: draft.limit,
      boot: root.boot,
      base: base.toString(),
      ...(draft.latest === undefined ? {} : { latest: draft.latest }),
      leases: draft.leases,
      line: draft.line,
    }
    const stamp = await pending.write(record, grantFlush(root))
    if (change.signal?.aborted) return { answer: change.aborted as T }
    const after = current.record === 'none' ? undefined : current.stamp
    const names = await pending.commit(gen, grantFlush(root), after)
    pending = undefined // The commit discarded it.
    if (!names) return undefined
    collect(folder, gen, names)
    return { answer, written: { gen, stamp, record } }
  } finally {
    pending?.discard()
  }
}

/** The answer of a decision that may not write (nothing kept). */
function decided<T>(step: Step<T>): T {
  if ('done' in step) return step.done
  throw new Error('a change of a semaphore that is not kept cannot write')
}

/**
 * The base a successor of `record` goes on from: its own when it was written in this boot (or every
 * grant is flushed); none (a fresh epoch) otherwise, as the mutex's `carriedBase` argues: a power loss may
 * have taken the old boot's last generations, and their sequences, with it.
 */
function carriedBase(root: Root, record: SemaphoreRecord): bigint | undefined {
  return sameBoot(record.boot, root.boot) || root.durability === 'acquire' ? BigInt(record.base) : undefined
}
