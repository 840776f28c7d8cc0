/**
 * What the object-store adapters of the `cas-lease` engine (S3, GCS) share, so neither copies the other
 * (backends never import each other): the object name of a lock key, the way back from a listed object
 * to its key (for `list`), and the rule that turns a failed request into a `BackendUnavailableError`.
 * DynamoDB keys items by the lock key itself and needs none of it.
 */
import { createHash } from 'node:crypto'
import { BackendUnavailableError, causeText, describeNetworkError, quoteKey } from '../../core/errors.js'
import type { CasListed, CasVersioned } from './adapter.js'
import { decodeRecord } from './record.js'

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

/** Characters of plain names: a key with any other character is hashed, whatever its length. */
const PLAIN_CHARS = /^[A-Za-z0-9._/-]*$/

/**
 * The name prefixes (after the store's prefix) to list for the lock keys starting with `prefix`: plain
 * keys are named as themselves, so `prefix` itself finds them; hashed names (`~…`) say nothing of their
 * key, so every one is listed and read, and its record says the key (`keyOfObject`). Both at once for
 * '' (everything); the hashed ones alone when no plain key can start with `prefix`.
 */
export function listedNamePrefixes(prefix: string): readonly string[] {
  if (prefix === '') return ['']
  if (prefix.startsWith('~') || !PLAIN_CHARS.test(prefix)) return ['~']
  return [prefix, '~']
}

/**
 * The lock key of the object named `name` (after the store's prefix) holding `body`: the name itself
 * when it is a plain key's, the key its record carries when the name is that key's hash; undefined for
 * anything else (another program's object, a hashed record of a fencelock version that did not write its
 * key: it is listed once a newer version writes it again).
 */
export function keyOfObject(name: string, body: string): string | undefined {
  if (!name.startsWith('~')) return objectNameOf(name) === name ? name : undefined
  const key = decodeRecord(body)?.key
  return key !== undefined && objectNameOf(key) === name ? key : undefined
}

/** Objects of one listed page read at once: a page of 1,000 is read in 1,000 GETs, this many in flight. */
const READS_AT_ONCE = 8

/**
 * The records of one listed page (`names` after the store's prefix), read with `read` (undefined: gone
 * since the listing), each with its key (`keyOfObject`), in the page's order.
 */
export async function* readListedPage(
  names: readonly string[],
  read: (name: string) => Promise<CasVersioned | undefined>,
): AsyncGenerator<CasListed> {
  for (let i = 0; i < names.length; i += READS_AT_ONCE) {
    const batch = names.slice(i, i + READS_AT_ONCE)
    const bodies = await Promise.all(batch.map(read))
    for (const [j, current] of bodies.entries()) {
      const key = current && keyOfObject(batch[j]!, current.body)
      if (current && key !== undefined) yield { key, current }
    }
  }
}

/**
 * Where elections live under the store's prefix (election.ts): `<prefix>~election/<name>`. No lock's
 * object can be there: a plain name never starts with '~', and a hashed one is '~' and 64 hex digits,
 * with no '/'. A listing of locks reads these objects too and leaves them out (`keyOfObject`: the key in
 * such a record is not the one its name would be).
 */
export const ELECTION_SEGMENT = '~election/'

/**
 * The longest prefix a backend accepts, so that prefix + the election segment + the longest name stays
 * under the stores' 1024 bytes.
 */
export const MAX_PREFIX_BYTES = 1024 - MAX_PLAIN_NAME_BYTES - ELECTION_SEGMENT.length

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
