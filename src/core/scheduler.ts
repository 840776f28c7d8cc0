/**
 * One timer for many deadlines: entries wait in a min-heap by the instant they are due (on `now()`'s
 * clock), and a single unref'd setTimeout is armed for the earliest. A client holding 50,000 locks had
 * two timers per lock, re-created at every renewal; with this it has one, and an entry costs no
 * allocation when it moves (it is its own heap node). A scheduler that keeps the process alive (the bounds
 * of store calls a caller awaits) holds its timer ref'd only while entries wait.
 */
import { now, timerDelay } from './clock.js'

/** What the scheduler keeps of an entry: written by the scheduler only. */
export interface Scheduled {
  /** When it is due; Infinity while not scheduled. */
  dueAt: number
  /** Its index in the heap, -1 while not in it. */
  heapIndex: number
}

/** An operation's bound on a scheduler: whoever runs the scheduler aborts `controller` when it comes due. */
export class Bound implements Scheduled {
  dueAt = Number.POSITIVE_INFINITY
  heapIndex = -1
  constructor(
    readonly controller: AbortController,
    /** The bound, for the message of the abort. */
    readonly ms: number,
  ) {}
}

export class Scheduler<T extends Scheduled> {
  readonly #heap: T[] = []
  /** Called once per timer run with the entries that came due (removed from the heap), in due order. */
  readonly #onDue: (entries: readonly T[], at: number) => void
  #timer: NodeJS.Timeout | undefined
  /** When the armed timer fires; Infinity when none is armed. */
  #timerAt = Number.POSITIVE_INFINITY
  readonly #fire = () => this.#run()
  /** Whether waiting entries keep the process alive (an idle scheduler never does). */
  readonly #keepAlive: boolean

  constructor(onDue: (entries: readonly T[], at: number) => void, { keepAlive = false } = {}) {
    this.#onDue = onDue
    this.#keepAlive = keepAlive
  }

  /** Entries waiting. */
  get size(): number {
    return this.#heap.length
  }

  /** (Re)schedules `entry` at `at`; moves it if it was already waiting. NaN is due now. */
  schedule(entry: T, at: number): void {
    // A NaN instant (a bound of a NaN duration) fails every comparison: in the heap it would never come
    // due, nor would any entry behind it. Due now, as a Node timer of NaN ms fires at once.
    if (Number.isNaN(at)) at = now()
    const heap = this.#heap
    const old = entry.dueAt
    entry.dueAt = at
    if (entry.heapIndex < 0) {
      if (heap.length === 0 && this.#keepAlive) this.#timer?.ref()
      entry.heapIndex = heap.length
      heap.push(entry)
      this.#up(entry.heapIndex)
    } else if (at < old) this.#up(entry.heapIndex)
    else this.#down(entry.heapIndex)
    if (at < this.#timerAt) this.#arm(at)
  }

  /** Takes `entry` out; nothing happens if it is not waiting. */
  cancel(entry: T): void {
    const i = entry.heapIndex
    if (i < 0) return
    entry.heapIndex = -1
    entry.dueAt = Number.POSITIVE_INFINITY
    const heap = this.#heap
    const last = heap.pop()!
    if (i < heap.length) {
      heap[i] = last
      last.heapIndex = i
      this.#up(i)
      this.#down(last.heapIndex)
    } else if (heap.length === 0 && this.#keepAlive) this.#timer?.unref()
    // The timer stays armed, even with the heap empty: a timer that fires early just re-arms (or, with
    // nothing left, stops), and the next entry is usually due later still (a lock acquired and released
    // in a loop would otherwise clear its timer at each release and set a new one at each grant).
  }

  #arm(at: number): void {
    clearTimeout(this.#timer)
    this.#timerAt = at
    this.#timer = setTimeout(this.#fire, timerDelay(at - now()))
    if (!this.#keepAlive || this.#heap.length === 0) this.#timer.unref()
  }

  #run(): void {
    this.#timer = undefined
    this.#timerAt = Number.POSITIVE_INFINITY
    const at = now()
    const heap = this.#heap
    const due: T[] = []
    // A Node timer may fire a fraction of a ms before its instant: what is not due yet waits for the next run.
    while (heap.length > 0 && heap[0]!.dueAt <= at) {
      const entry = heap[0]!
      this.cancel(entry)
      due.push(entry)
    }
    try {
      if (due.length > 0) this.#onDue(due, at)
    } finally {
      // Armed once for the earliest entry left (those just run may have rescheduled themselves).
      if (heap.length > 0 && heap[0]!.dueAt < this.#timerAt) this.#arm(heap[0]!.dueAt)
    }
  }

  #up(i: number): void {
    const heap = this.#heap
    const entry = heap[i]!
    while (i > 0) {
      const parentIndex = (i - 1) >> 1
      const parent = heap[parentIndex]!
      if (parent.dueAt <= entry.dueAt) break
      heap[i] = parent
      parent.heapIndex = i
      i = parentIndex
    }
    heap[i] = entry
    entry.heapIndex = i
  }

  #down(i: number): void {
    const heap = this.#heap
    const entry = heap[i]!
    const n = heap.length
    for (let left = 2 * i + 1; left < n; left = 2 * i + 1) {
      const right = left + 1
      const child = right < n && heap[right]!.dueAt < heap[left]!.dueAt ? right : left
      if (heap[child]!.dueAt >= entry.dueAt) break
      heap[i] = heap[child]!
      heap[i]!.heapIndex = i
      i = child
    }
    heap[i] = entry
    entry.heapIndex = i
  }
}
