/**
 * Every change of a primitive kept as one whole record per folder (a semaphore, a read-write lock) is one
 * compare-and-swap on its folder, the generation store's (generations.ts):
 * read the state N, decide, write the whole new record to a temp file that pins the folder, and link() it
 * as generation N+1, which only one writer of all that read N wins (and only while N is still the very
 * file read). So a grant decides on exactly the record it succeeds (a semaphore counts its permits, a
 * read-write lock sees its line), whoever writes at the same time, from any process of the host.
 *
 * The sequence of a generation g is `base + g`, the base going on from the record read (when it was
 * written in this boot) or a fresh epoch's (epochs.ts, `nextBase`): after a new or removed folder, an
 * unreadable record, a record of another boot. So sequences only grow, also after the folder was retired.
 *
 * A writer that lost the race reads again and decides again, at once: not a retry of a failure but the next
 * state, as the mutex's acquire does (its READ_ROUNDS), bounded, with no wait.
 */
import { nextBase } from './epochs.js'
import { createFolder } from './folders.js'
import { type Current, collect, type Pending, pendingIn, type Stamp } from './generations.js'
import { sameBoot } from './host-clock.js'
import { grantFlush, type Root } from './root.js'

/** What every whole record keeps: the boot it was written in, and the base of its sequences. */
export interface WholeRecord {
  readonly boot: string
  /** Decimal string: the sequence of any generation g of this folder is `base + g`. */
  readonly base: string
}

/** How one primitive's records are read, seen live and written. */
export interface RecordKind<R extends WholeRecord, D> {
  /** What the records are of, for messages ("semaphore"). */
  readonly what: string
  /** The state of a folder: its highest generation and that file's record. */
  readonly read: (folder: string) => Promise<Current<R>>
  /** The record as it stands now, in boot `boot` (ended leases and lapsed places left out). */
  readonly live: (record: R, boot: string) => R
  /** The whole record a change's draft becomes. */
  readonly build: (draft: D, fields: { readonly key: string } & WholeRecord) => R
}

/**
 * What a change decides on the live view of the state it read (undefined: none kept): an answer without a
 * write, or a write, given the sequence of the generation it would be, and the answer once it stands.
 */
export type Step<T, D> =
  | { readonly done: T }
  | { readonly write: (sequence: bigint) => { readonly record: D; readonly answer: T } }

/** The generation a change wrote: the record, its file, and the folder's state it leaves. */
export interface Written<R> {
  readonly gen: bigint
  readonly stamp: Stamp
  readonly record: R
}

export interface Change<T, R, D> {
  /** Whether the change makes the folder when missing (an acquire, setLimit); others find nothing to change. */
  readonly creates: boolean
  /** The answer when the state is an unreadable record still counting as held for `ms`. */
  readonly unreadable: (ms: number) => T
  /** The decision on the state read, generation `gen` (0: none). */
  readonly decide: (view: R | undefined, gen: bigint) => Step<T, D>
  /** The caller stopped waiting: write nothing (its answer would never be read). */
  readonly signal?: AbortSignal | undefined
  /** The answer when `signal` aborted before the write. */
  readonly aborted?: T
}

/**
 * How many reads one change makes at most: each after a writer that got in between our read and our link.
 * The writers of one record link in microseconds; losing this many times in a row means a store
 * changing faster than it can be followed, reported as an outage the core may retry.
 */
const ROUNDS = 16

/** Applies `change` to the record of `key` in `folder`: its answer, and the generation written, if any. */
export async function updateRecord<R extends WholeRecord, D, T>(
  kind: RecordKind<R, D>,
  root: Root,
  key: string,
  folder: string,
  change: Change<T, R, D>,
): Promise<{ readonly answer: T; readonly written?: Written<R> }> {
  for (let round = 0; round < ROUNDS; round++) {
    const result = await once(kind, root, key, folder, change)
    if (result) return result
  }
  throw new Error(`the ${kind.what}'s record changed under ${ROUNDS} writes in a row; try again`)
}

/** One read, decision and link; undefined when another writer (or a removal) got in between. */
async function once<R extends WholeRecord, D, T>(
  kind: RecordKind<R, D>,
  root: Root,
  key: string,
  folder: string,
  change: Change<T, R, D>,
): Promise<{ readonly answer: T; readonly written?: Written<R> } | undefined> {
  let pending: Pending | undefined
  try {
    let current: Current<R> = await kind.read(folder)
    if (current.record === 'none') {
      if (!change.creates) return { answer: decided(kind.what, change.decide(undefined, 0n)) }
      // A new record, or its folder removed: (re)make it, pin it, then read it again, so that what we
      // decide is decided on the folder our link lands in, and a fresh epoch is taken after any removal.
      const made = 'missing' in current && current.missing && createFolder(folder, root.shared) !== undefined
      pending = pendingIn(folder)
      if (!pending) return undefined
      if (!made) {
        current = await kind.read(folder)
        if ('missing' in current && current.missing) return undefined
      }
    }
    let view: R | undefined
    let carried: bigint | undefined
    if (current.record === 'unreadable') {
      const remaining = root.unreadable.remainingMs(folder, current.gen)
      if (remaining > 0) return { answer: change.unreadable(remaining) }
    } else if (current.record !== 'none') {
      view = kind.live(current.record, root.boot)
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
    const record = kind.build(draft, { key, boot: root.boot, base: base.toString() })
    const stamp = await pending.write(record, grantFlush(root))
    if (change.signal?.aborted) return { answer: change.aborted as T }
    const after = 'stamp' in current ? current.stamp : undefined
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
function decided<T, D>(what: string, step: Step<T, D>): T {
  if ('done' in step) return step.done
  throw new Error(`a change of a ${what} that is not kept cannot write`)
}

/**
 * The base a successor of `record` goes on from: its own when it was written in this boot (or every
 * grant is flushed); none (a fresh epoch) otherwise, as the mutex's `carriedBase` argues: a power loss may
 * have taken the old boot's last generations, and their sequences, with it.
 */
function carriedBase(root: Root, record: WholeRecord): bigint | undefined {
  return sameBoot(record.boot, root.boot) || root.durability === 'acquire' ? BigInt(record.base) : undefined
}
