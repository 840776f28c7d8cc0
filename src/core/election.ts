/**
 * Leader election: whoever holds the lease on the election's name leads. `campaign` runs the core's
 * acquire loop on the backend's election facet, so leadership is renewed, fenced (the term is the grant's
 * fence) and lost exactly as a lock is; the election adds the leader's value (`proclaim`) and a view of
 * who leads, vacancy included (`leader`, `observe`).
 */
import { linkedAbort } from './abort.js'
import type { ElectionFacet, LockInfo } from './backend.js'
import { now, sleep } from './clock.js'
import { describeValue } from './durations.js'
import { BackendUnavailableError, LockError } from './errors.js'
import { whileHeld } from './holding.js'
import type { LockHandle } from './lock.js'
import type { AcquireOptions } from './options.js'

/** The longest election value, in UTF-8 bytes: an address or an id, not a document. */
export const MAX_VALUE_BYTES = 1024

/** What `campaign` is told: an acquire's options, and the value to lead with. */
export interface CampaignOptions extends AcquireOptions {
  /**
   * What this candidate publishes while it leads (its address, its id), at most 1 KiB of UTF-8, no NUL;
   * observers see it as `value`. @default ''
   */
  readonly value?: string | undefined
  /** How long to wait while another candidate leads. @default Infinity: a candidate waits its turn */
  readonly timeout?: AcquireOptions['timeout']
}

/** The leadership `campaign` won: held until `resign` (or `await using` ends), renewed meanwhile. */
export interface Leadership extends AsyncDisposable {
  /** The election's name. */
  readonly election: string
  /** A random 128-bit id naming this candidate (`LeaderView.owner` while it leads). */
  readonly owner: string
  /**
   * The term: strictly greater than every earlier leadership's of this election (the fence of its grant).
   * Pass it with every write the leader makes, and have the resource refuse a lower one than it has seen:
   * that is what makes a paused ex-leader harmless. Works with the fence guards as a lock's `fence` does.
   */
  readonly term: bigint
  /** The same number as `term`, under the name the fence guards read. */
  readonly fence: bigint
  /** The value published now (the campaign's, or the last `proclaim`'s). */
  readonly value: string
  /** Aborts with a `LockLostError` when leadership is lost (not when it is resigned). */
  readonly signal: AbortSignal
  /** Until when (`performance.now()`'s clock) leadership is certainly ours; renewals move it forward. */
  readonly validUntil: number
  /** How long leadership is still certainly ours, in ms. */
  readonly remainingMs: number
  /**
   * Publishes a new value, only while this leadership holds (checked on the store with the term).
   * @throws {LockLostError} when leadership was lost; {BackendUnavailableError} when the outcome is unknown
   */
  proclaim(value: string): Promise<void>
  /** Steps down; idempotent. Observers see a vacancy, then the next leader. */
  resign(): Promise<void>
}

/** Who leads an election, as the store says now. Diagnostic: only `campaign` makes a leader. */
export type LeaderView =
  | {
      readonly leader: false
      /** The term of the latest leadership, where the store still knows it. */
      readonly term?: bigint | undefined
    }
  | {
      readonly leader: true
      /** The leadership's term (its fence). */
      readonly term: bigint | undefined
      /** The leader's value. */
      readonly value: string | undefined
      /** The leader's owner id (`Leadership.owner`). */
      readonly owner: string | undefined
      /** The leader's holder description, where the store keeps it. */
      readonly holder?: string | undefined
      /** True when a leadership of this client holds it. */
      readonly isMe: boolean
      /** The leader's remaining lease as the store sees it, in ms. */
      readonly expiresInMs?: number | undefined
    }

/** An election, by name: `locks.election(name)`. */
export interface Election {
  /** The election's name. */
  readonly name: string
  /**
   * Waits to lead, then resolves with the leadership. Never resolves for a candidate whose lease was lost
   * while it waited: it goes on waiting with a new one, or rejects.
   * @throws {LockNotAcquiredError} when `timeout` passes while another candidate leads
   * @throws {CapabilityError} when the backend offers no election
   */
  campaign(options?: CampaignOptions): Promise<Leadership>
  /** Campaigns, runs `fn` while leading, and resigns afterwards; `fn` should stop when `lead.signal` aborts. */
  withLeadership<T>(fn: (lead: Leadership) => T | Promise<T>, options?: CampaignOptions): Promise<T>
  /** One read of who leads now. @throws {BackendUnavailableError} when the store fails or does not answer in 5 s */
  leader(options?: { readonly signal?: AbortSignal | undefined }): Promise<LeaderView>
  /**
   * Who leads, now and at every change (a new leader, a new value, a vacancy), until `signal` aborts or
   * the loop is left. Consecutive views differ. Notified where the store notifies, else read once a second.
   * @throws {BackendUnavailableError} when the store has failed for 10 s without a break
   */
  observe(options?: { readonly signal?: AbortSignal | undefined }): AsyncIterable<LeaderView>
}

/** What an election needs from its client (src/core/client.ts). */
export interface ElectionRuntime {
  /** The backend's election facet, after the client's checks (closed, key and ttl limits, capability). */
  facet(name: string, ttlMs?: number): Promise<ElectionFacet>
  /** Runs one campaign: the acquire loop on the election facet. */
  campaign(name: string, options: CampaignOptions | undefined, value: string): Promise<LockHandle>
  /** One read bounded like `inspect`. */
  inspect(name: string, signal: AbortSignal | undefined): Promise<LockInfo>
  /** Aborts when the client closes. */
  readonly closing: AbortSignal
}

/** How often an observer reads where the store cannot notify, and as a fallback where it can. */
const OBSERVE_POLL_MS = 1000
const OBSERVE_FALLBACK_MS = 5000
/** The least time between two reads of an observer (a watch that keeps waking spuriously must not spin). */
const OBSERVE_MIN_GAP_MS = 20
/** An observer's store failing this long without a break ends the observation. */
const OBSERVE_GIVE_UP_MS = 10_000

// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is what is refused
const NUL = /\u0000/

/** Checks an election value. @throws {TypeError} naming the problem */
export function parseValue(value: unknown): string {
  if (typeof value !== 'string') {
    throw new TypeError(`Expected the election \`value\` to be a string, got ${describeValue(value)}`)
  }
  const bytes = Buffer.byteLength(value)
  if (bytes > MAX_VALUE_BYTES) {
    throw new TypeError(
      `Expected the election \`value\` to be at most ${MAX_VALUE_BYTES} bytes of UTF-8, got ${bytes}: publish an ` +
        'address or an id, and keep larger data where the leader can be reached',
    )
  }
  if (NUL.test(value)) {
    throw new TypeError(
      'Expected the election `value` to hold no NUL character (U+0000): some stores cannot keep one',
    )
  }
  return value
}

class LeadershipHandle implements Leadership {
  readonly #lock: LockHandle
  readonly #facet: ElectionFacet
  /** Called once leadership ends (resigned or lost): the election stops counting it as `isMe`. */
  readonly #ended: () => void
  #value: string

  constructor(lock: LockHandle, facet: ElectionFacet, value: string, ended: () => void) {
    this.#lock = lock
    this.#facet = facet
    this.#value = value
    this.#ended = ended
    const lost = lock.signal
    if (lost.aborted) ended()
    else lost.addEventListener('abort', ended, { once: true })
  }

  get election(): string {
    return this.#lock.key
  }
  get owner(): string {
    return this.#lock.owner
  }
  get term(): bigint {
    return this.#lock.fence
  }
  get fence(): bigint {
    return this.#lock.fence
  }
  get value(): string {
    return this.#value
  }
  get signal(): AbortSignal {
    return this.#lock.signal
  }
  get validUntil(): number {
    return this.#lock.validUntil
  }
  get remainingMs(): number {
    return this.#lock.remainingMs
  }

  async proclaim(value: string): Promise<void> {
    const checked = parseValue(value)
    await this.#lock.update('proclaim a value for', async (lease, signal) => {
      const result = await this.#facet.proclaim(lease, checked, signal)
      return result.proclaimed ? { done: true, cookie: result.cookie } : { done: false }
    })
    this.#value = checked
  }

  resign(): Promise<void> {
    return this.#lock.release().finally(this.#ended)
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign()
  }
}

/** Two views say the same thing (an observer yields only changes). */
function same(a: LeaderView, b: LeaderView): boolean {
  if (!a.leader || !b.leader) return a.leader === b.leader && a.term === b.term
  return a.term === b.term && a.owner === b.owner && a.value === b.value && a.isMe === b.isMe
}

export class ElectionImpl implements Election {
  readonly name: string
  readonly #runtime: ElectionRuntime
  /** The owner ids of this client's leaderships of this election, while they hold it: `isMe`. */
  readonly #mine = new Set<string>()

  constructor(name: string, runtime: ElectionRuntime) {
    this.name = name
    this.#runtime = runtime
  }

  async campaign(options?: CampaignOptions): Promise<Leadership> {
    const value = options?.value === undefined ? '' : parseValue(options.value)
    const facet = await this.#runtime.facet(this.name)
    const lock = await this.#runtime.campaign(this.name, options, value)
    const owner = lock.owner
    this.#mine.add(owner)
    return new LeadershipHandle(lock, facet, value, () => this.#mine.delete(owner))
  }

  async withLeadership<T>(fn: (lead: Leadership) => T | Promise<T>, options?: CampaignOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError('Expected `fn` to be a function')
    const lead = await this.campaign(options)
    return whileHeld(lead, () => lead.resign(), fn)
  }

  async leader(options?: { readonly signal?: AbortSignal | undefined }): Promise<LeaderView> {
    return this.#view(await this.#runtime.inspect(this.name, options?.signal))
  }

  #view(info: LockInfo): LeaderView {
    if (!info.held) return info.fence === undefined ? { leader: false } : { leader: false, term: info.fence }
    return {
      leader: true,
      term: info.fence,
      value: info.value,
      owner: info.owner,
      ...(info.holder === undefined ? {} : { holder: info.holder }),
      isMe: info.owner !== undefined && this.#mine.has(info.owner),
      ...(info.expiresInMs === undefined ? {} : { expiresInMs: info.expiresInMs }),
    }
  }

  async *observe(options?: { readonly signal?: AbortSignal | undefined }): AsyncGenerator<LeaderView> {
    const caller = options?.signal
    if (caller !== undefined && !(caller instanceof AbortSignal)) {
      throw new TypeError(`Expected \`signal\` to be an AbortSignal, got ${describeValue(caller)}`)
    }
    const facet = await this.#runtime.facet(this.name)
    const link = linkedAbort(caller, this.#runtime.closing)
    let last: LeaderView | undefined
    let failingSince: number | undefined
    let backoffMs = 100
    try {
      for (;;) {
        if (link.signal.aborted) return
        // The watch is armed before the read, so a change between the two wakes the next round.
        const round = linkedAbort(link.signal)
        const watching = facet.watch?.(this.name, round.signal).catch(() => {})
        const readAt = now()
        let view: LeaderView | undefined
        try {
          view = await this.leader({ signal: link.signal })
          failingSince = undefined
          backoffMs = 100
        } catch (error) {
          if (link.signal.aborted) return
          if (error instanceof LockError && !(error instanceof BackendUnavailableError)) throw error
          failingSince ??= readAt
          if (now() - failingSince >= OBSERVE_GIVE_UP_MS) throw error
        }
        if (view && (last === undefined || !same(last, view))) {
          last = view
          yield view
        }
        let waitMs = view ? (watching ? OBSERVE_FALLBACK_MS : OBSERVE_POLL_MS) : backoffMs
        // A leader that stops renewing leaves when its lease ends, which no store announces: read then.
        if (view?.leader && view.expiresInMs !== undefined) {
          waitMs = Math.min(waitMs, Math.max(view.expiresInMs + 5, 100))
        }
        if (!view) backoffMs = Math.min(backoffMs * 2, 1000)
        const timer = sleep(waitMs, round.signal)
        await (watching && view ? Promise.race([watching, timer]) : timer)
        const gap = OBSERVE_MIN_GAP_MS - (now() - readAt)
        if (gap > 0) await sleep(gap, link.signal)
        round.abort(new Error('the observer read again'))
        round.dispose()
      }
    } finally {
      link.dispose()
    }
  }
}
