/**
 * The attribute names and values of fencelock's OpenTelemetry signals, in the semantic conventions' style
 * (a `fencelock.` namespace, snake_case values, the shared `error.type`), and the few functions that
 * turn a diagnostics message's fields into low-cardinality values.
 */

/** Every attribute `fencelock/otel` sets; docs/observability.md says which signal carries which. */
export const ATTR = {
  /** The kind of store: `redis`, `postgres`, `file`, ... (the backend URL's scheme, normalised). */
  backend: 'fencelock.backend',
  /** The store itself, as its backend names it (`redis://127.0.0.1:6379/0`); never a secret. */
  store: 'fencelock.store',
  /** The lock's key: only with `recordKeys`. */
  key: 'fencelock.key',
  /** `granted`, `not_acquired`, `unavailable`, `aborted` or `error`. */
  acquireOutcome: 'fencelock.acquire.outcome',
  /** Attempts an acquire made (spans only). */
  attempts: 'fencelock.acquire.attempts',
  /** The holder's owner id (spans only: one per acquire). */
  owner: 'fencelock.lock.owner',
  /** The grant's fencing token, as a decimal string (spans only). */
  fence: 'fencelock.lock.fence',
  /** How a hold ended: `released` or `lost`. */
  holdOutcome: 'fencelock.hold.outcome',
  /** Why a lock was lost: `expired`, `not_owner`, `session_ended` or `client_closed`. */
  lossReason: 'fencelock.loss.reason',
  /** The store call that failed: `acquire`, `extend` or `release`. */
  operation: 'fencelock.operation',
  /** The semantic conventions' error class: an error code (`ECONNREFUSED`, `FENCELOCK_NOT_ACQUIRED`) or name. */
  errorType: 'error.type',
} as const

/** URL schemes that are another spelling of one kind of store. */
const SAME_KIND: Readonly<Record<string, string>> = {
  rediss: 'redis',
  postgresql: 'postgres',
  mariadb: 'mysql',
  gs: 'gcs',
}

/**
 * The kind of store a backend id names: its URL scheme (`postgres://...` -> `postgres`), one name per
 * kind; an id without a scheme (a custom id) is its own kind up to the first `:` or `+`.
 */
export function backendKind(id: string): string {
  const scheme = /^[a-z][a-z0-9.-]*/i.exec(id)?.[0]?.toLowerCase() ?? 'unknown'
  return SAME_KIND[scheme] ?? scheme
}

/**
 * The semantic conventions' `error.type` of `error`: its code where it has one that reads as a code
 * (`ECONNREFUSED`, a SQLSTATE, `FENCELOCK_NOT_ACQUIRED`), else its class's name (`TimeoutError`), else
 * `_OTHER`. Never the message: messages carry keys and addresses, a new series each.
 */
export function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const { code, name } = error as { code?: unknown; name?: unknown }
    if (typeof code === 'string' && /^[\w.-]{1,64}$/.test(code)) return code
    if (typeof name === 'string' && name !== 'Error' && /^[\w.-]{1,64}$/.test(name)) return name
  }
  return '_OTHER'
}

/** The `fencelock.acquire.outcome` of an acquire that failed with `error`. */
export function acquireOutcome(
  error: unknown,
  aborted: boolean,
): 'not_acquired' | 'unavailable' | 'aborted' | 'error' {
  if (aborted) return 'aborted'
  const code = (error as { code?: unknown } | null)?.code
  if (code === 'FENCELOCK_NOT_ACQUIRED') return 'not_acquired'
  if (code === 'FENCELOCK_BACKEND_UNAVAILABLE' || code === 'FENCELOCK_QUORUM') return 'unavailable'
  return 'error'
}
