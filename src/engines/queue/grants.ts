/**
 * Who is granted in a queue: the queue engine's grant rule (engine.ts), decided by the engine from the
 * entries ahead of ours that its adapter read, never by the adapter. Curator's `getsTheLock(children,
 * ourNode, maxLeases)` is the model.
 *
 * A rule says how many of the entries just before ours it reads (`looksBack`), so that the adapter reads
 * no more than that (etcd: a range limit): the mutex's rule costs the reads "is ours first?" did. A rule
 * that needs the whole line ahead (a read-write lock's "no writer ahead of a reader", a semaphore's count)
 * looks back without limit (`Infinity`).
 *
 * A counting semaphore's rule is per request (its own permits) and reads what its adapter counted with the
 * line (`Counted`: each entry's permits, the stored limit). `permitsFit` is the one place of its test,
 * also for the semaphore engine (semaphore-engine.ts). A read-write lock's rule is per request too (its
 * mode) and reads each entry's mode, which its adapter read with the line (`readWriteRule`).
 */
import type { RwLockMode } from '../../core/backend.js'

/** What a rule decides for our entry: granted, or the entry ahead of ours whose deletion to wait for. */
export type GrantDecision<Entry> =
  | { readonly granted: true }
  | { readonly granted: false; readonly waitFor: Entry }

/** What an adapter of a counting line (a semaphore's) read beside the entries ahead of ours. */
export interface Counted<Entry> {
  /** The permits of each entry of `ahead`, in the same order. */
  readonly permits: readonly number[]
  /** The stored limit. */
  readonly limit: number
  /**
   * The line itself as a thing to wait for (ZooKeeper: its children), for the first waiting entry: any
   * entry ahead leaving may admit it.
   */
  readonly line: Entry
}

export interface GrantRule {
  /**
   * How many of the newest entries ahead of ours the rule reads. With that many ahead and none of them
   * read (an adapter step that read the head of the line instead), ours is not granted.
   */
  readonly looksBack: number
  /**
   * Decides from `ahead`: the entries ahead of ours, oldest first, the newest `looksBack` of them, and
   * for a counting rule what the adapter counted with them, for a read-write rule each one's mode (a
   * downgraded writer's is `read`), in the same order.
   */
  decide<Entry>(
    ahead: readonly Entry[],
    counted?: Counted<Entry>,
    modes?: readonly RwLockMode[],
  ): GrantDecision<Entry>
}

const GRANTED = { granted: true } as const

/**
 * Granted while fewer than `n` entries are ahead of ours: a mutex is `firstN(1)`, n permits `firstN(n)`.
 * A waiter waits for the n-th entry ahead of its own (Curator's `children.get(ourIndex - maxLeases)`):
 * when it goes, ours is granted unless older entries remain. For n > 1 an entry between them going is
 * found only by the waiter's next read of the line.
 */
export function firstN(n: number): GrantRule {
  if (!Number.isSafeInteger(n) || n < 1) throw new RangeError(`Expected n to be an integer >= 1, got ${n}`)
  return {
    looksBack: n,
    decide: <Entry>(ahead: readonly Entry[]): GrantDecision<Entry> =>
      ahead.length < n ? GRANTED : { granted: false, waitFor: ahead[ahead.length - n]! },
  }
}

/** The rule of a mutex: the first entry in line holds the lock. */
export const FIRST_IN_LINE: GrantRule = firstN(1)

/**
 * The counting semaphore's test: granted when the permits of every entry ahead plus ours fit under the
 * limit. Strict FIFO: an entry fits only if every entry ahead of it fits too, so a large request is never
 * passed by smaller ones behind it.
 */
export function permitsFit(ahead: Iterable<number>, mine: number, limit: number): boolean {
  let taken = mine
  for (const permits of ahead) taken += permits
  return taken <= limit
}

/**
 * A counting semaphore's rule for a request of `mine` permits (`permitsFit`). Waiting without a herd
 * (Curator's `InterProcessSemaphoreV2`, whose admission lock does the same): the first waiting entry
 * waits for the line (any entry ahead leaving may admit it); every later one waits for the waiting entry
 * just ahead of it, which its adapter announces when admitted (or deletes), since none can be admitted
 * before the ones ahead of it.
 */
export function permitsRule(mine: number): GrantRule {
  return {
    looksBack: Number.POSITIVE_INFINITY,
    decide: <Entry>(ahead: readonly Entry[], counted?: Counted<Entry>): GrantDecision<Entry> => {
      if (!counted)
        throw new TypeError("a semaphore's grant rule needs the permits and limit its adapter read")
      if (permitsFit(counted.permits, mine, counted.limit)) return GRANTED
      // The entry just ahead waits too when the entries up to it do not fit: it goes (or is admitted) first.
      const before = ahead.at(-1)
      if (before !== undefined && !permitsFit(counted.permits, 0, counted.limit))
        return { granted: false, waitFor: before }
      return { granted: false, waitFor: counted.line }
    },
  }
}

/**
 * A read-write lock's rule for a request of `mode`: a writer when it is first (a mutex's rule: it waits for
 * the entry just before its own), a reader when no writer is ahead of it, held or waiting, so no reader
 * passes a queued writer. A reader waits for the newest writer ahead (etcd's `RWMutex` does the same): the
 * older ones go first, and only readers behind that writer watch it. A downgraded writer counts as a
 * reader; since a writer is granted only when first, a downgraded one is always the head of the line.
 */
export function readWriteRule(mode: RwLockMode): GrantRule {
  if (mode === 'write') return FIRST_IN_LINE
  return {
    looksBack: Number.POSITIVE_INFINITY,
    decide: <Entry>(
      ahead: readonly Entry[],
      _counted?: Counted<Entry>,
      modes?: readonly RwLockMode[],
    ): GrantDecision<Entry> => {
      if (!modes || modes.length !== ahead.length)
        throw new TypeError("a reader's grant rule needs the mode of every entry ahead, read by its adapter")
      const writer = modes.lastIndexOf('write')
      return writer < 0 ? GRANTED : { granted: false, waitFor: ahead[writer]! }
    },
  }
}
