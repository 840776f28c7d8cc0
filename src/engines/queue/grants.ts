/**
 * Who is granted in a queue: the queue engine's grant rule (engine.ts), decided by the engine from the
 * entries ahead of ours that its adapter read, never by the adapter. Curator's `getsTheLock(children,
 * ourNode, maxLeases)` is the model.
 *
 * A rule says how many of the entries just before ours it reads (`looksBack`), so that the adapter reads
 * no more than that (etcd: a range limit): the mutex's rule costs the reads "is ours first?" did. A rule
 * that needs the whole line ahead (a read-write lock's "no writer ahead of a reader") looks back without
 * limit (`Infinity`).
 */

/** What a rule decides for our entry: granted, or the entry ahead of ours whose deletion to wait for. */
export type GrantDecision<Entry> =
  | { readonly granted: true }
  | { readonly granted: false; readonly waitFor: Entry }

export interface GrantRule {
  /**
   * How many of the newest entries ahead of ours the rule reads. With that many ahead and none of them
   * read (an adapter step that read the head of the line instead), ours is not granted.
   */
  readonly looksBack: number
  /** Decides from `ahead`: the entries ahead of ours, oldest first, the newest `looksBack` of them. */
  decide<Entry>(ahead: readonly Entry[]): GrantDecision<Entry>
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
