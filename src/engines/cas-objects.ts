/**
 * What the object-store drivers of the `cas-lease` engine (S3, GCS) share, so neither copies the other
 * (backends never import each other): the object name of a lock key, and the rule that turns a failed
 * request into a `BackendUnavailableError`. DynamoDB keys items by the lock key itself and needs neither.
 */
import { createHash } from 'node:crypto'
import { BackendUnavailableError, causeText, describeNetworkError, quoteKey } from '../core/errors.js'

/** Object names longer than this (UTF-8 bytes) are hashed: a prefix plus the name stays far below both stores' 1024. */
const MAX_PLAIN_NAME_BYTES = 256

/**
 * Path segments of letters, digits, '.', '_' and '-', joined by single '/': characters that need no
 * escaping in S3 keys, GCS object names, URLs or shells. '.' and '..' alone are refused by GCS.
 */
const PLAIN_NAME = /^(?!\.{1,2}(?:\/|$))[A-Za-z0-9._-]+(?:\/(?!\.{1,2}(?:\/|$))[A-Za-z0-9._-]+)*$/

/**
 * The object name (after the prefix) of lock `key`: the key itself when it is plain (see PLAIN_NAME) and
 * short, else `~` and the SHA-256 of its UTF-8 bytes in hex. '~' never starts a plain name, so a hashed
 * name never meets a kept one; both forms keep names that differ only in case apart (DESIGN.md §3 "Keys").
 */
export function objectNameOf(key: string): string {
  if (PLAIN_NAME.test(key) && Buffer.byteLength(key) <= MAX_PLAIN_NAME_BYTES) return key
  return `~${createHash('sha256').update(key, 'utf8').digest('hex')}`
}

/** The longest prefix a backend accepts, so that prefix + the longest name stays under the stores' 1024 bytes. */
export const MAX_PREFIX_BYTES = 1024 - MAX_PLAIN_NAME_BYTES

/**
 * The object prefix given by a URL's path or an option: '' and '/' mean `fallback`; a prefix not ending in
 * '/' gets one, so `s3://b/app` keeps its locks under `app/`. A '.' or '..' segment is refused, as in keys
 * (PLAIN_NAME): a URL's path never has one (the URL parser resolves them), and HTTP layers and
 * S3-compatible stores may resolve or refuse one in an object name, so the prefix would not mean what it says.
 * @throws {TypeError} when the prefix has a dot segment or is too long to leave room for object names
 */
export function objectPrefix(prefix: string | undefined, fallback: string): string {
  if (prefix !== undefined && typeof prefix !== 'string') {
    throw new TypeError(
      `Expected \`prefix\` to be a string such as ${JSON.stringify(fallback)}, got ${typeof prefix}`,
    )
  }
  if (prefix?.split('/').some((s) => s === '.' || s === '..')) {
    throw new TypeError(
      `Expected an object prefix without "." or ".." segments, got ${JSON.stringify(prefix.slice(0, 100))}: ` +
        'write the folder it should mean, e.g. "app/locks/"',
    )
  }
  const text = (prefix ?? '').replace(/^\/+/, '')
  const out = text === '' ? fallback : text.endsWith('/') ? text : `${text}/`
  if (Buffer.byteLength(out) > MAX_PREFIX_BYTES) {
    throw new TypeError(
      `Expected an object prefix of at most ${MAX_PREFIX_BYTES} bytes, got ${Buffer.byteLength(out)}`,
    )
  }
  return out
}

/** What a store said about a failed request: its HTTP status, when it answered at all. */
export interface StoreFailure {
  /** The HTTP status; undefined when no response came (network, credentials, abort). */
  readonly status: number | undefined
  readonly cause: unknown
}

/**
 * A failed request as fencelock reports it: retryable when waiting can help (no answer at all, 408, 429,
 * 5xx), not for what repeats until someone changes a setting (403 credentials, 404 bucket, 400).
 * `nonRetryable`: failures without a status that are still permanent (a missing credential).
 */
export function storeUnavailable(
  what: string,
  key: string,
  backend: string,
  failure: StoreFailure,
  nonRetryable = false,
): BackendUnavailableError {
  const { status, cause } = failure
  const retryable =
    !nonRetryable && (status === undefined || status === 408 || status === 429 || status >= 500)
  // Only without a status: describeNetworkError reads `code` as a string, and GCS's ApiError has a numeric one.
  const reason = (status === undefined ? describeNetworkError(cause) : undefined) ?? causeText(cause)
  return new BackendUnavailableError(
    `${what} of lock ${quoteKey(key)} failed at ${backend}${status ? ` (HTTP ${status})` : ''}: ${reason}`,
    { key, backend, cause, retryable },
  )
}
