/**
 * The errors fencelock throws. Each has a stable `code` (match on it, not on the message), the `key` and the
 * `backend` it concerns, and the underlying `cause` when there is one. Contention
 * (`LockNotAcquiredError`) and unavailability (`BackendUnavailableError`) are never the same error.
 */

/** The longest part of a key a message shows: a key can be megabytes, a message should be a line. */
const KEY_SHOWN = 80

/**
 * A key as messages show it: quoted, and cut (with its full length) when long. The error's `key` field
 * keeps the whole key; a message never does.
 */
export function quoteKey(key: string): string {
  if (key.length <= KEY_SHOWN) return JSON.stringify(key)
  return `${JSON.stringify(key.slice(0, KEY_SHOWN))}… (${Buffer.byteLength(key)} bytes)`
}

/** The primitives whose leases the core's handle and acquire loop run. */
export type Primitive = 'lock' | 'election' | 'semaphore' | 'rwlock'

/** What a message speaks of: "lock 'k'", "leadership of election 'k'" or "permits of semaphore 'k'". */
export function subjectOf(primitive: Primitive | undefined, key: string): string {
  if (primitive === 'election') return `leadership of election ${quoteKey(key)}`
  if (primitive === 'semaphore') return `permits of semaphore ${quoteKey(key)}`
  if (primitive === 'rwlock') return `read-write lock ${quoteKey(key)}`
  return `lock ${quoteKey(key)}`
}

/** A driver's message, cut to one readable line (some quote whole requests back). */
export function causeText(error: unknown, max = 300): string {
  const text = String((error as Error)?.message ?? error).replace(/\s+/g, ' ')
  return text.length <= max ? text : `${text.slice(0, max)}…`
}

/**
 * A network failure in plain words ("connection refused at 127.0.0.1:6379"), from the error or any of its
 * causes; undefined when it is not one we recognise. `address` names the server when the error does not.
 */
export function describeNetworkError(error: unknown, address?: string): string | undefined {
  for (
    let e = error as (Error & { code?: unknown; address?: string; port?: number }) | undefined, depth = 0;
    e && depth < 5;
    depth++
  ) {
    const at = e.address ? `${e.address}${e.port ? `:${e.port}` : ''}` : address
    const where = at ? ` at ${at}` : ''
    const message = String(e.message ?? '')
    switch (e.code) {
      case 'ECONNREFUSED':
        return `connection refused${where} (is the server running, on this port?)`
      case 'ENOTFOUND':
      case 'EAI_AGAIN':
        return `host not found${where}`
      case 'ETIMEDOUT':
        return `connection timed out${where}`
      case 'ECONNRESET':
      case 'EPIPE':
        return `connection reset${where}`
      case 'EHOSTUNREACH':
      case 'ENETUNREACH':
        return `host unreachable${where}`
    }
    // Some clients put an HTTP status in `code` (a number): only a string can name a TLS error.
    if (
      (typeof e.code === 'string' && e.code.startsWith('ERR_SSL')) ||
      /SSL|TLS|wrong version number|certificate/i.test(message)
    ) {
      return `TLS handshake failed${where} (${causeText(e, 120)}); check that the server speaks TLS and trusts this client, or use the plain scheme`
    }
    if (/NOAUTH|WRONGPASS|invalid username-password|authentication failed|auth.*fail/i.test(message)) {
      return `authentication failed${where}: check the user and password in the URL`
    }
    e = e.cause as typeof e
  }
  return undefined
}

/**
 * Every `code` a fencelock error can carry. A union of literals, so that comparing `error.code` with a
 * misspelled code fails to compile.
 */
export type FencelockErrorCode =
  | 'FENCELOCK_NOT_ACQUIRED'
  | 'FENCELOCK_LOST'
  | 'FENCELOCK_RELEASED'
  | 'FENCELOCK_BACKEND_UNAVAILABLE'
  | 'FENCELOCK_QUORUM'
  | 'FENCELOCK_CAPABILITY'
  | 'FENCELOCK_DRIVER_MISSING'
  | 'FENCELOCK_CLIENT_CLOSED'
  /** Redis: the lock's keys hold data fencelock did not write (another program uses the names). */
  | 'FENCELOCK_KEY_CONFLICT'
  /** An acquire of a key inside `withLock` of the same key: it would wait for itself for ever. */
  | 'FENCELOCK_SELF_DEADLOCK'
  /** A semaphore opened with a limit other than the one its store keeps. */
  | 'FENCELOCK_LIMIT_MISMATCH'

/** Context carried by every fencelock error. */
export interface LockErrorContext {
  /** The lock key concerned. */
  readonly key?: string | undefined
  /** The backend's id (`LockBackend.id`). */
  readonly backend?: string | undefined
  /** The error underneath, kept as the error's `cause`. */
  readonly cause?: unknown
}

/** Base class of every fencelock error. */
export class LockError extends Error {
  override name = 'LockError'
  /** A stable machine-readable code such as `FENCELOCK_NOT_ACQUIRED`; each subclass narrows it to its own. */
  readonly code: FencelockErrorCode
  /** The lock key concerned, when there is one. */
  readonly key: string | undefined
  /** The backend id (for example `file:///var/lock/fencelock`), when there is one. */
  readonly backend: string | undefined

  constructor(code: FencelockErrorCode, message: string, context: LockErrorContext = {}) {
    super(message, context.cause === undefined ? undefined : { cause: context.cause })
    this.code = code
    this.key = context.key
    this.backend = context.backend
  }
}

/** The deadline passed while another owner held the lock. */
export class LockNotAcquiredError extends LockError {
  override name = 'LockNotAcquiredError'
  declare readonly code: 'FENCELOCK_NOT_ACQUIRED'
  constructor(message: string, context: LockErrorContext = {}) {
    super('FENCELOCK_NOT_ACQUIRED', message, context)
  }
}

/** The lease was lost (expired, taken over, or unreachable past its validity) while we believed we held it. */
export class LockLostError extends LockError {
  override name = 'LockLostError'
  declare readonly code: 'FENCELOCK_LOST'
  constructor(message: string, context: LockErrorContext = {}) {
    super('FENCELOCK_LOST', message, context)
  }
}

/** An operation on a lock that was already released. */
export class LockReleasedError extends LockError {
  override name = 'LockReleasedError'
  declare readonly code: 'FENCELOCK_RELEASED'
  constructor(message: string, context: LockErrorContext = {}) {
    super('FENCELOCK_RELEASED', message, context)
  }
}

/** The store could not be reached, or answered with an error; says nothing about who holds the lock. */
export class BackendUnavailableError extends LockError {
  override name = 'BackendUnavailableError'
  /** Its own code, or its subclass {@link QuorumError}'s. */
  declare readonly code: 'FENCELOCK_BACKEND_UNAVAILABLE' | 'FENCELOCK_QUORUM'
  /**
   * Whether waiting could help (a restart, a failover). False for errors that repeat until someone
   * changes a setting, such as a wrong password: a waiting acquire then fails at once.
   */
  readonly retryable: boolean
  constructor(
    message: string,
    context: LockErrorContext & { readonly retryable?: boolean | undefined } = {},
  ) {
    super('FENCELOCK_BACKEND_UNAVAILABLE', message, context)
    this.retryable = context.retryable ?? true
  }
}

/** One node's failure inside a {@link QuorumError}. */
export interface NodeFailure {
  /** The node's id, as its backend names it in errors. */
  readonly node: string
  /** What it failed with. */
  readonly error: unknown
}

/** A quorum-based backend could not reach a majority of its nodes. */
export class QuorumError extends BackendUnavailableError {
  override name = 'QuorumError'
  override readonly code = 'FENCELOCK_QUORUM'
  /** Each node that failed, and why. */
  readonly failures: readonly NodeFailure[]
  constructor(message: string, failures: readonly NodeFailure[], context: LockErrorContext = {}) {
    super(message, context)
    this.failures = failures
  }
}

/** The backend cannot do what was asked (for example a feature its store does not offer). */
export class CapabilityError extends LockError {
  override name = 'CapabilityError'
  declare readonly code: 'FENCELOCK_CAPABILITY'
  constructor(message: string, context: LockErrorContext = {}) {
    super('FENCELOCK_CAPABILITY', message, context)
  }
}

/**
 * A semaphore was opened with a limit other than the one its store keeps: both cannot be honoured, so the
 * acquire is refused rather than granted under either. `setLimit` changes the stored limit.
 */
export class LimitMismatchError extends LockError {
  override name = 'LimitMismatchError'
  declare readonly code: 'FENCELOCK_LIMIT_MISMATCH'
  /** The limit the store keeps. */
  readonly storedLimit: number
  /** The limit this client asked with. */
  readonly requestedLimit: number
  constructor(storedLimit: number, requestedLimit: number, context: LockErrorContext & { key: string }) {
    super(
      'FENCELOCK_LIMIT_MISMATCH',
      `Semaphore ${quoteKey(context.key)}${context.backend ? ` on ${context.backend}` : ''} has limit ` +
        `${storedLimit}, not ${requestedLimit}: every client must open it with the same limit. Open it with ` +
        `{ limit: ${storedLimit} }, or change the stored limit with semaphore.setLimit(${requestedLimit})`,
      context,
    )
    this.storedLimit = storedLimit
    this.requestedLimit = requestedLimit
  }
}

/** The backend's driver package is not installed. */
export class DriverMissingError extends LockError {
  override name = 'DriverMissingError'
  declare readonly code: 'FENCELOCK_DRIVER_MISSING'
  /** The npm package to install. */
  readonly packageName: string
  constructor(packageName: string, message: string, context: LockErrorContext = {}) {
    super('FENCELOCK_DRIVER_MISSING', message, context)
    this.packageName = packageName
  }
}

/** The client was closed while the operation was pending. */
export class ClientClosedError extends LockError {
  override name = 'ClientClosedError'
  declare readonly code: 'FENCELOCK_CLIENT_CLOSED'
  constructor(message: string, context: LockErrorContext = {}) {
    super('FENCELOCK_CLIENT_CLOSED', message, context)
  }
}
