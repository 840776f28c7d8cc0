/**
 * The fault switches of the S3 and GCS test servers and their request log (the shell, http-fake.ts,
 * applies them to each request between its arrival and its commit).
 */

/** What a fault matches a request by. */
export interface Addressed {
  readonly method: string
  /** The raw (percent-encoded) path. */
  readonly path: string
}

/** Which requests a fault applies to; an absent field matches everything. */
export interface FaultMatch {
  /** HTTP method, upper case. */
  readonly method?: string
  /** The raw (percent-encoded) path: a string matches exactly, a RegExp by `test`. */
  readonly path?: string | RegExp
}

/** The statuses `failNext` can inject. */
export type InjectedStatus = 409 | 429 | 500 | 503

/** One request the server answered (or dropped), in the order the answers happened. */
export interface LoggedRequest {
  readonly method: string
  /** The raw (percent-encoded) path. */
  readonly path: string
  /** The query string without its `?` ('' when none). */
  readonly query: string
  /** The status sent, or the status the dropped response would have had. */
  readonly status: number
  /** How a fault changed it: 'failed' (injected status, nothing committed), 'dropped' (committed, no reply). */
  readonly fault?: 'failed' | 'dropped'
}

/** The fault switches and the request log, the same on both servers. */
export interface FakeControls {
  /**
   * Delays every matching request by `ms` between its arrival and its commit (the first matching rule
   * counts); `delay(0)` removes every delay rule.
   */
  delay(ms: number, match?: FaultMatch): void
  /**
   * Holds every matching request between its arrival and its commit until the returned release is called
   * (an ordering tool without timing: a test lets a request commit exactly when it wants).
   */
  hold(match?: FaultMatch): () => void
  /** The next `count` matching requests fail with `status` and the dialect's error body. */
  failNext(count: number, status: InjectedStatus, match?: FaultMatch): void
  /** The next `count` matching requests commit, then lose their response (the socket is destroyed). */
  dropResponseAfterCommit(count: number, match?: FaultMatch): void
  /** Ignores every precondition while on (like s3rver), so `doctor` has something to catch. */
  lax(on: boolean): void
  /** Answers without a `Date` header while on (a store that shows no clock), so `doctor` has something to catch. */
  withoutDate(on: boolean): void
  /** How many requests have arrived and not reached their commit yet (e.g. held by a delay). */
  readonly inFlight: number
  /** Every request answered so far, oldest first. */
  readonly requests: readonly LoggedRequest[]
  /** Empties the request log. */
  clearLog(): void
  /** Removes every pending fault (delays, holds, failures, drops) and turns lax mode and `withoutDate` off. */
  clearFaults(): void
}

interface CountedFault {
  remaining: number
  readonly match?: FaultMatch | undefined
}

interface FailFault extends CountedFault {
  readonly status: InjectedStatus
}

interface DelayFault {
  readonly ms: number
  readonly match?: FaultMatch | undefined
}

interface Hold {
  readonly match?: FaultMatch | undefined
  readonly released: Promise<void>
}

const matches = (match: FaultMatch | undefined, request: Addressed): boolean =>
  !match ||
  ((match.method === undefined || match.method === request.method) &&
    (match.path === undefined ||
      (typeof match.path === 'string' ? match.path === request.path : match.path.test(request.path))))

/** Takes one use of the first matching counted fault, if any. */
function takeFault<F extends CountedFault>(faults: F[], request: Addressed): F | undefined {
  const fault = faults.find((f) => f.remaining > 0 && matches(f.match, request))
  if (fault) fault.remaining -= 1
  return fault
}

/** The pending faults of one server and its request log. */
export class Faults {
  readonly failures: FailFault[] = []
  readonly drops: CountedFault[] = []
  delays: DelayFault[] = []
  holds: Hold[] = []
  /** The release of every hold still on, so `clear()` can let their requests go. */
  readonly releases: (() => void)[] = []
  readonly log: LoggedRequest[] = []
  inFlight = 0
  /** Answers carry no `Date` header. */
  withoutDate = false

  /** The injected failure for `request`, if one is pending (it is used up). */
  takeFailure(request: Addressed): FailFault | undefined {
    return takeFault(this.failures, request)
  }

  /** Whether `request`'s response is to be dropped after its commit (the drop is used up). */
  takeDrop(request: Addressed): boolean {
    return takeFault(this.drops, request) !== undefined
  }

  delayFor(request: Addressed): number {
    return this.delays.find((d) => matches(d.match, request))?.ms ?? 0
  }

  /** Resolves when every hold matching `request` is released. */
  async holdsFor(request: Addressed): Promise<void> {
    await Promise.all(this.holds.filter((h) => matches(h.match, request)).map((h) => h.released))
  }

  hold(match: FaultMatch | undefined): () => void {
    let release = () => {}
    const released = new Promise<void>((resolve) => {
      release = resolve
    })
    const hold = { match, released }
    this.holds.push(hold)
    const end = () => {
      this.holds = this.holds.filter((h) => h !== hold)
      release()
    }
    this.releases.push(end)
    return end
  }

  clear(): void {
    this.failures.length = 0
    this.drops.length = 0
    this.delays = []
    this.withoutDate = false
    for (const release of this.releases.splice(0)) release()
  }
}
