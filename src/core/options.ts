import { hostname } from 'node:os'
import type { BackendLimits, LeaseFacet, PermitRequest, RwLockRequest } from './backend.js'
import { type Duration, describeValue, parseDuration } from './durations.js'

/** Options of `createLockClient`; each is also the default for every call on that client. */
export interface ClientOptions {
  /**
   * The lease: how long a lock outlives its holder if the holder dies without releasing.
   * @default '30s'
   */
  readonly ttl?: Duration | undefined
  /**
   * How long `acquire` waits for a held lock. `tryAcquire` always defaults to 0.
   * @default Infinity
   */
  readonly timeout?: Duration | undefined
  /**
   * Renew held locks automatically every ttl/3 until released.
   * @default true
   */
  readonly renew?: boolean | undefined
  /**
   * The share of the ttl subtracted from a lease's validity for clock-rate drift between the store and us.
   * @default 0.01
   */
  readonly driftFactor?: number | undefined
  /**
   * Who holds the lock, in words, stored with each grant and shown by `inspect` and the CLI's waiting line
   * ("held by build-7 (pid 4121)"). Diagnostic only: the random owner id, never this text, decides who
   * may extend or release. At most 256 bytes of UTF-8, no control characters.
   * @default `<host name> (pid <pid>)`
   */
  readonly holder?: string | undefined
}

/** Options of one acquire of any primitive; a lock's `acquire`, `tryAcquire` and `withLock` take `LockOptions`. */
export interface AcquireOptions {
  /** The lease for this lock. @default the client's `ttl` */
  readonly ttl?: Duration | undefined
  /** How long to wait while someone else holds the lock. @default Infinity for acquire, 0 for tryAcquire */
  readonly timeout?: Duration | undefined
  /** Aborts the wait; the call rejects with `signal.reason` unchanged. */
  readonly signal?: AbortSignal | undefined
  /** Renew automatically until released. @default the client's `renew` */
  readonly renew?: boolean | undefined
  /** Who holds the lock, in words (see `ClientOptions.holder`). @default the client's `holder` */
  readonly holder?: string | undefined
}

/** What a lock's `acquire`, `tryAcquire` and `withLock` take: `AcquireOptions` and `resumable`. */
export interface LockOptions extends AcquireOptions {
  /**
   * The lock will be handed on with `lock.token()` (docs/resume.md). Needed on etcd, whose locks otherwise
   * share one lease per client and ttl: a resumable lock gets a lease of its own. Elsewhere every lease can
   * be resumed, and it changes nothing; a store that cannot resume refuses it with a `CapabilityError`
   * before any I/O. @default false
   */
  readonly resumable?: boolean | undefined
}

export interface ResolvedClientOptions {
  readonly ttlMs: number
  readonly timeoutMs: number
  readonly renew: boolean
  readonly driftFactor: number
  readonly holder: string
}

/** The shortest lease we accept: below it the 2 ms validity margin and timer resolution eat the lease. */
export const MIN_TTL_MS = 10
export const DEFAULT_TTL_MS = 30_000

/**
 * The limits of a backend that declares none: keys up to 64 KiB of UTF-8, leases up to about 285 years
 * (2^53 ms would overflow nothing in JavaScript, but a store's arithmetic on it might).
 */
export const DEFAULT_LIMITS: BackendLimits = { maxKeyBytes: 65_536, maxTtlMs: 2 ** 43 }

const CLIENT_OPTIONS = ['ttl', 'timeout', 'renew', 'driftFactor', 'holder'] as const
export const ACQUIRE_OPTIONS = ['ttl', 'timeout', 'signal', 'renew', 'holder'] as const
/** A lock's acquire options (`LockOptions`): the others take only `ACQUIRE_OPTIONS`. */
export const LOCK_OPTIONS = [...ACQUIRE_OPTIONS, 'resumable'] as const

function assertObject(name: string, value: unknown): void {
  if (value !== undefined && (typeof value !== 'object' || value === null)) {
    throw new TypeError(`Expected \`${name}\` to be an object, got ${describeValue(value)}`)
  }
}

/** Edit distance, for "did you mean" (option names are short: the quadratic table is nothing). */
function distance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    previous = row
  }
  return previous[b.length]!
}

/** The known name closest to `name`, if it is close enough to be a typo. */
export function suggest(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined
  let bestDistance = Number.POSITIVE_INFINITY
  for (const candidate of known) {
    const d = distance(name.toLowerCase(), candidate.toLowerCase())
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return bestDistance <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined
}

/**
 * Refuses option names nobody reads: a typo such as `tiemout` would otherwise silently mean "wait forever".
 * @throws {TypeError} naming the option, the closest known one and all known ones
 */
export function assertKnownKeys(what: string, value: object | undefined, known: readonly string[]): void {
  if (value === undefined) return
  for (const name of Object.keys(value)) {
    if (known.includes(name)) continue
    const guess = suggest(name, known)
    throw new TypeError(
      `Unknown option \`${name}\` in ${what}${guess ? `; did you mean \`${guess}\`?` : ''} Known options: ${known.join(', ')}`,
    )
  }
}

/**
 * Checks a key and a ttl against what the backend's store can represent, before any I/O.
 * @throws {TypeError} naming the backend and the limit it crossed
 */
export function checkLimits(backend: LeaseFacet, key: string, ttlMs: number | undefined): void {
  const limits = backend.limits ?? DEFAULT_LIMITS
  // Cheap first: a string of n UTF-16 units has at most 3n UTF-8 bytes.
  if (key.length * 3 > limits.maxKeyBytes) {
    const bytes = Buffer.byteLength(key)
    if (bytes > limits.maxKeyBytes) {
      throw new TypeError(
        `Expected \`key\` to be at most ${limits.maxKeyBytes} bytes of UTF-8 on ${backend.id}, got ${bytes} bytes ` +
          `(starting ${JSON.stringify(key.slice(0, 40))}). Use a shorter name, e.g. a hash of it`,
      )
    }
  }
  if (limits.nulInKeys === false && key.includes('\0')) {
    throw new TypeError(
      `Expected \`key\` without NUL (U+0000) on ${backend.id}, which cannot store it, got one at index ` +
        `${key.indexOf('\0')} (starting ${JSON.stringify(key.slice(0, 40))}). Leave it out, or encode the key`,
    )
  }
  if (limits.reservedKeyPrefix !== undefined && key.startsWith(limits.reservedKeyPrefix)) {
    throw new TypeError(
      `Expected \`key\` not to start with ${JSON.stringify(limits.reservedKeyPrefix)} on ${backend.id}, which keeps ` +
        `another primitive's entries under it (starting ${JSON.stringify(key.slice(0, 40))}). Use another name`,
    )
  }
  if (ttlMs !== undefined && ttlMs > limits.maxTtlMs) {
    throw new TypeError(
      `Expected \`ttl\` to be at most ${limits.maxTtlMs} ms on ${backend.id} (the longest lease its store can keep), ` +
        `got ${ttlMs} ms`,
    )
  }
  // Accepted, a shorter lease would be granted and then lost at its first renewal, every time.
  if (ttlMs !== undefined && limits.minTtlMs !== undefined && ttlMs < limits.minTtlMs) {
    throw new TypeError(
      `Expected \`ttl\` to be at least ${limits.minTtlMs} ms on ${backend.id} (the shortest lease its store can ` +
        `keep renewed: a lock is renewed every ttl/3, and the store takes writes to one lock only so often), got ${ttlMs} ms`,
    )
  }
}

function parseBoolean(name: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback
  if (typeof value !== 'boolean')
    throw new TypeError(`Expected \`${name}\` to be a boolean, got ${describeValue(value)}`)
  return value
}

export function parseTtl(value: unknown, name = 'ttl'): number {
  return parseDuration(name, value, { min: MIN_TTL_MS })
}

export function resolveClientOptions(options: ClientOptions | undefined): ResolvedClientOptions {
  assertObject('options', options)
  assertKnownKeys('createLockClient options', options, CLIENT_OPTIONS)
  const o = options ?? {}
  const driftFactor = o.driftFactor ?? 0.01
  if (typeof driftFactor !== 'number' || !(driftFactor >= 0 && driftFactor < 0.5)) {
    throw new TypeError(
      `Expected \`driftFactor\` to be a number in [0, 0.5), got ${describeValue(driftFactor)}`,
    )
  }
  return {
    ttlMs: o.ttl === undefined ? DEFAULT_TTL_MS : parseTtl(o.ttl),
    timeoutMs:
      o.timeout === undefined
        ? Number.POSITIVE_INFINITY
        : parseDuration('timeout', o.timeout, { allowInfinity: true }),
    renew: parseBoolean('renew', o.renew, true),
    driftFactor,
    holder: o.holder === undefined ? defaultHolder() : parseHolder(o.holder),
  }
}

export interface ResolvedAcquireOptions {
  readonly ttlMs: number
  readonly timeoutMs: number
  readonly renew: boolean
  readonly signal: AbortSignal | undefined
  readonly holder: string
  /** An election candidate's value (`AcquireRequest.value`); absent on a mutex. */
  readonly value?: string | undefined
  /** A semaphore's limit and permits (`AcquireRequest.semaphore`); absent on a mutex. */
  readonly semaphore?: PermitRequest | undefined
  /** A read-write lock's mode (`AcquireRequest.rwlock`); absent on a mutex. */
  readonly rwlock?: RwLockRequest | undefined
  /** A lock to be handed on with its token (`LockOptions.resumable`); absent elsewhere. */
  readonly resumable?: boolean | undefined
}

/** `options` checked, with the client's defaults; `known` the options this call takes. */
export function resolveAcquireOptions(
  options: LockOptions | undefined,
  defaults: ResolvedClientOptions,
  defaultTimeoutMs: number,
  known: readonly string[] = ACQUIRE_OPTIONS,
): ResolvedAcquireOptions {
  assertObject('options', options)
  assertKnownKeys('acquire options', options, known)
  const o = options ?? {}
  const resumable = parseBoolean('resumable', o.resumable, false)
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) {
    throw new TypeError(`Expected \`signal\` to be an AbortSignal, got ${describeValue(o.signal)}`)
  }
  return {
    ttlMs: o.ttl === undefined ? defaults.ttlMs : parseTtl(o.ttl),
    timeoutMs:
      o.timeout === undefined
        ? defaultTimeoutMs
        : parseDuration('timeout', o.timeout, { allowInfinity: true }),
    renew: parseBoolean('renew', o.renew, defaults.renew),
    signal: o.signal,
    holder: o.holder === undefined ? defaults.holder : parseHolder(o.holder),
    ...(resumable ? { resumable } : {}),
  }
}

/** C0 and C1 control characters (newlines, terminal escapes), runs of them. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]+/

/** The longest holder description, in UTF-8 bytes: a line in a status display, not a document. */
export const MAX_HOLDER_BYTES = 256

/**
 * Checks a user-supplied holder description. Control characters are refused: the text is printed on
 * terminals by `inspect` and the CLI, where an escape sequence could rewrite what an operator sees.
 * @throws {TypeError} naming the problem
 */
export function parseHolder(value: unknown, name = 'holder'): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new TypeError(`Expected \`${name}\` to be a non-empty string, got ${describeValue(value)}`)
  }
  if (CONTROL.test(value)) {
    throw new TypeError(
      `Expected \`${name}\` without control characters (newlines, escapes), got ${JSON.stringify(value)}`,
    )
  }
  const bytes = Buffer.byteLength(value)
  if (bytes > MAX_HOLDER_BYTES) {
    throw new TypeError(
      `Expected \`${name}\` to be at most ${MAX_HOLDER_BYTES} bytes of UTF-8, got ${bytes} bytes ` +
        `(starting ${JSON.stringify(value.slice(0, 40))})`,
    )
  }
  return value
}

/**
 * Makes any text a valid holder description: control characters become spaces and it is cut to
 * `MAX_HOLDER_BYTES` with an ellipsis. For descriptions we build (a command line), not for user input.
 */
export function toHolder(text: string): string {
  let out = text.replace(new RegExp(CONTROL.source, 'g'), ' ')
  if (Buffer.byteLength(out) <= MAX_HOLDER_BYTES) return out
  while (Buffer.byteLength(out) > MAX_HOLDER_BYTES - 3) out = [...out].slice(0, -1).join('')
  return `${out}…`
}

let cachedHolder: string | undefined
/** `<host name> (pid <pid>)`: which process holds a lock, enough to find it and, if need be, kill it. */
export function defaultHolder(): string {
  cachedHolder ??= toHolder(`${hostname()} (pid ${process.pid})`)
  return cachedHolder
}

/** A UTF-16 surrogate not paired with its other half (with the `u` flag a valid pair is one code point). */
const LONE_SURROGATE = /\p{Cs}/u

/**
 * Refuses what is not a key: anything but a non-empty string, and ill-formed UTF-16. Every store writes a
 * key as UTF-8, where each lone surrogate becomes U+FFFD: keys differing only there would share one lock.
 * @throws {TypeError} naming the position of the first lone surrogate
 */
export function validateKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new TypeError(`Expected \`key\` to be a non-empty string, got ${describeValue(key)}`)
  }
  const lone = LONE_SURROGATE.exec(key)
  if (lone) {
    const unit = key.charCodeAt(lone.index).toString(16).toUpperCase()
    throw new TypeError(
      `Expected \`key\` to be well-formed UTF-16, got a lone surrogate \\u${unit} at index ${lone.index} ` +
        `(starting ${JSON.stringify(key.slice(0, 40))}): keys differing only there would share one lock. ` +
        'Use key.toWellFormed() or encode the bytes (hex, base64) yourself',
    )
  }
  // Slots semaphores name their slots with it (src/core/slots.ts): no user key may be one of theirs.
  const reserved = key.indexOf('\uFFFF')
  if (reserved !== -1) {
    throw new TypeError(
      `Expected \`key\` without U+FFFF, a noncharacter kept for the keys of semaphore slots, got one at index ` +
        `${reserved} (starting ${JSON.stringify(key.slice(0, 40))}). Leave it out, or encode the key`,
    )
  }
}

/** A `list` prefix: any string a key may start with, '' for every key. */
export function validateListPrefix(prefix: unknown): asserts prefix is string {
  if (typeof prefix !== 'string') {
    throw new TypeError(
      `Expected the list prefix to be a string ('' for every key), got ${describeValue(prefix)}`,
    )
  }
  if (prefix !== '') validateKey(prefix)
}

/** Validity from the monotonic instant taken before the request: Redlock's MIN_VALIDITY. */
export function validUntil(attemptStart: number, ttlMs: number, driftFactor: number): number {
  return attemptStart + ttlMs - (ttlMs * driftFactor + 2)
}
