/**
 * The history of a chaos run: one JSON object per line, appended by the worker processes, the protected
 * resource and the nemesis. Times (`t`) are milliseconds of CLOCK_MONOTONIC (`process.hrtime.bigint()`),
 * which every process on the host shares; a process under a clock fault (libfaketime) does not stamp its
 * own events: the harness stamps them on receipt (see worker.ts).
 *
 * Fences travel as decimal strings (JSON has no bigint).
 */

interface Base {
  /** CLOCK_MONOTONIC, ms (fractional). */
  readonly t: number
  /** The worker that did it ("w1", …), "resource", or "nemesis". */
  readonly client: string
}

/** One acquisition attempt of a worker: `acquire()` called. */
export interface AcquireInvoke extends Base {
  readonly ev: 'acquire-invoke'
  /** Unique per acquire call within the run (worker id + counter). */
  readonly op: string
  readonly key: string
  readonly ttlMs: number
}

export interface AcquireOk extends Base {
  readonly ev: 'acquire-ok'
  readonly op: string
  readonly key: string
  readonly owner: string
  readonly fence: string
  /** The lock's validity deadline, as the library reported it (`lock.validUntil`), on the same clock. */
  readonly validUntil: number
  /** A read-write lock's grant: shared (`read`) or exclusive (`write`). Absent elsewhere. */
  readonly mode?: 'read' | 'write' | undefined
}

export interface AcquireFail extends Base {
  readonly ev: 'acquire-fail'
  readonly op: string
  readonly key: string
  /**
   * false when the request may have been applied (a timeout or a lost connection, not a refusal): the
   * checker then counts a *maybe-hold* of `ttlMs` from the invoke.
   */
  readonly definite: boolean
  readonly reason: string
}

/** A renewal that moved `validUntil` (the library renews by itself; the worker reports the new deadline). */
export interface RenewOk extends Base {
  readonly ev: 'renew-ok'
  readonly op: string
  readonly validUntil: number
}

/** `lock.signal` aborted: the library says the lock is lost. */
export interface Lost extends Base {
  readonly ev: 'lost'
  readonly op: string
  readonly reason: string
}

export interface ReleaseInvoke extends Base {
  readonly ev: 'release-invoke'
  readonly op: string
}

export interface ReleaseOk extends Base {
  readonly ev: 'release-ok'
  readonly op: string
  /** false: it was no longer ours (expired or taken). */
  readonly released: boolean
}

export interface ReleaseFail extends Base {
  readonly ev: 'release-fail'
  readonly op: string
  readonly reason: string
}

/** A worker sends a write to the protected resource, inside its critical section. */
export interface WriteInvoke extends Base {
  readonly ev: 'write-invoke'
  readonly op: string
  readonly key: string
  readonly fence: string
  /** Unique per write: what a lost-update check looks for in the final state. */
  readonly value: string
}

/** The resource's answer (stamped by the resource when it decides). */
export interface WriteResult extends Base {
  readonly ev: 'write-accepted' | 'write-rejected'
  readonly op: string
  readonly key: string
  readonly fence: string
  readonly value: string
  /** The highest fence the resource had accepted for the key before this write. */
  readonly highest: string
}

/** The resource's state at the end: every value it kept, per key (unfenced mode: for lost updates). */
export interface FinalRead extends Base {
  readonly ev: 'final-read'
  readonly key: string
  readonly values: readonly string[]
}

export interface Fault extends Base {
  readonly ev: 'fault-start' | 'fault-end'
  /** "pause-holder", "kill-holder", "server-restart", "partition", "latency", "lost-reply", "clock", … */
  readonly type: string
  /** What it hit: a worker id, a server name, a proxy. */
  readonly target: string
}

/**
 * An operator's break of a key's lock (`LockClient.break`), run by the nemesis through a client of its own.
 * Stamped when it answered (or failed); `invokedAt` is when it was called. A break ends whatever grant its
 * first look at the store found, so the fence it reports must be that of a grant live when it began.
 */
export interface Break extends Base {
  readonly ev: 'break'
  readonly key: string
  /** When `break` was called (`t` is its answer). */
  readonly invokedAt: number
  /** What it answered; absent when it failed (`reason`), and then it may or may not have ended a grant. */
  readonly broken?: boolean | undefined
  /** The grant it reports: the one it ended (`broken`), or the one it left alone. */
  readonly fence?: string | undefined
  readonly owner?: string | undefined
  /** Why it failed (the error's message), when it did. */
  readonly reason?: string | undefined
}

/**
 * A process that could not run for a while (its event loop stalled: the machine was busy): a worker, or
 * the harness itself (client 'harness'), whose stamps of everything it received in the meantime are late.
 * Stamped when the stall ended; `ms` is how long it lasted. Nobody injected it: it is load, and the
 * checker treats it as the pause it is (a stalled client cannot hear of a loss on time).
 */
export interface Stall extends Base {
  readonly ev: 'stall'
  readonly ms: number
}

export type HistoryEvent =
  | Stall
  | AcquireInvoke
  | AcquireOk
  | AcquireFail
  | RenewOk
  | Lost
  | ReleaseInvoke
  | ReleaseOk
  | ReleaseFail
  | WriteInvoke
  | WriteResult
  | FinalRead
  | Fault
  | Break

/** Parses a history file's text (JSON lines; a truncated last line, from a killed process, is skipped). */
export function parseHistory(text: string): HistoryEvent[] {
  const events: HistoryEvent[] = []
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue
    try {
      events.push(JSON.parse(line) as HistoryEvent)
    } catch {
      // A worker killed mid-write leaves half a line; everything before it stands.
    }
  }
  return events.sort((a, b) => a.t - b.t)
}
