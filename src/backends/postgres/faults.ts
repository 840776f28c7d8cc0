/**
 * PostgreSQL errors in words, and which ones waiting can help: every failure of a statement becomes a
 * `BackendUnavailableError` naming the key, the server and the cause, `retryable` unless it repeats until
 * someone changes a setting (a wrong password, a missing database, no privilege, a schema that does not
 * exist), or a server that does not accept the TLS the client requires.
 */
import {
  BackendUnavailableError,
  causeText,
  describeNetworkError,
  type Primitive,
  subjectOf,
} from '../../core/errors.js'

/** SQLSTATE classes and codes that waiting does not cure. */
const PERMANENT = [
  /^28/, // invalid authorization (wrong password, no pg_hba entry)
  /^3D/, // invalid catalog name (no such database)
  /^3F/, // invalid schema name
  /^42/, // syntax error or access rule violation (no privilege, undefined table or column)
  /^22/, // data exception (a value the column cannot hold)
]

/** postgres.js codes of errors on our side that are not the server's (no SQLSTATE). */
const CLIENT_PERMANENT = new Set([
  'SASL_SIGNATURE_MISMATCH',
  'AUTH_TYPE_NOT_IMPLEMENTED',
  'MESSAGE_NOT_SUPPORTED',
])

/** Whether waiting (a restart, a failover, a killed connection re-made) can make `error` go away. */
export function retryable(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code
  if (typeof code !== 'string') return true
  if (CLIENT_PERMANENT.has(code)) return false
  return !PERMANENT.some((p) => p.test(code))
}

/**
 * Whether a CREATE failed because another client made the same thing at that moment: on the catalog's
 * unique index (23505), on a table's row type created a moment before by the other (42710, "type …
 * already exists": seen in CI, 50 contenders on 5 clients of a fresh database), or reporting it exists
 * (42P07). It is there now if the other creation committed: the caller checks.
 */
export function createRaced(error: unknown): boolean {
  const code = (error as { code?: unknown } | undefined)?.code
  return code === '23505' || code === '42710' || code === '42P07'
}

/** Whether `error` could be the server dropping our TLS handshake (what a server without TLS does). */
export function droppedHandshake(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown } | undefined
  return e?.code === 'ECONNRESET' || /TLS/.test(String(e?.message ?? ''))
}

/** The server answered the TLS request with "no": permanent until its `ssl` setting or the URL changes. */
export function tlsRefused(
  error: unknown,
  what: string,
  key: string | undefined,
  backend: string,
  primitive: Primitive = 'lock',
): BackendUnavailableError {
  const subject = key === undefined ? '' : ` ${subjectOf(primitive, key)}`
  return new BackendUnavailableError(
    `Could not ${what}${subject} on ${backend}: the server does not accept TLS (ssl is off on it). ` +
      'Turn ssl on in its postgresql.conf, or connect without TLS (sslmode=disable, or prefer)',
    { key, backend, cause: error, retryable: false },
  )
}

/**
 * A statement's failure as the error the core expects: "Could not <what>[ <subject>] on <backend>: <why>",
 * the subject being "lock <key>" or, on an elections table (`primitive` 'election'), "leadership of
 * election <key>". `what` is the action alone ("acquire", "check the lock table"): this adds " on
 * <backend>" itself.
 */
export function unavailable(
  error: unknown,
  what: string,
  key: string | undefined,
  backend: string,
  primitive: Primitive = 'lock',
): BackendUnavailableError {
  if (error instanceof BackendUnavailableError) return error
  const sqlstate = (error as { code?: unknown } | undefined)?.code
  const reason =
    describeNetworkError(error) ??
    `${causeText(error)}${typeof sqlstate === 'string' && /^[0-9A-Z]{5}$/.test(sqlstate) ? ` (SQLSTATE ${sqlstate})` : ''}`
  const subject = key === undefined ? '' : ` ${subjectOf(primitive, key)}`
  // A relation missing after the first use: the table or its fence sequence dropped, or made by hand without the sequence.
  const hint =
    sqlstate === '42P01'
      ? `. The ${tableNoun(primitive)} or its fence sequence is missing: \`fencelock doctor\` gives the DDL that makes them`
      : ''
  return new BackendUnavailableError(`Could not ${what}${subject} on ${backend}: ${reason}${hint}`, {
    key,
    backend,
    cause: error,
    retryable: retryable(error),
  })
}

/** What the table of `primitive`'s rows is called in messages. */
export function tableNoun(primitive: Primitive): string {
  return primitive === 'election' ? 'elections table' : 'lock table'
}
