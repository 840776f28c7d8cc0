/**
 * A held lock's token (`lock.token()`): what another process needs to continue the lock with
 * `locks.resume(token)`. `fencelock1.` and the base64url of one JSON object: the backend's id, the key, the
 * owner id, the fence (a decimal string), the lease's ttl and the backend's cookie data. It carries no store
 * credentials (a backend id never holds a password), but the owner id in it is the ownership itself:
 * whoever has the token can renew or release the lock, so it is handed on as a secret.
 */
import { describeValue } from './durations.js'
import { validateKey } from './options.js'

/** The version this library writes and reads; another version is refused, saying so. */
const PREFIX = 'fencelock1.'

/** What a token says. */
export interface LockToken {
  /** The backend's id (`LeaseFacet.id`), e.g. `redis://127.0.0.1:6379`: a resume elsewhere is refused. */
  readonly backend: string
  readonly key: string
  readonly owner: string
  readonly fence: bigint
  /** The lease's ttl when the token was made: a resume's ttl unless it asks for another. */
  readonly ttlMs: number
  /** The backend's cookie data (`ResumeFacet.encode`); absent when it needs none. */
  readonly cookie?: unknown
}

/** The token of `token`'s fields. */
export function encodeToken(token: LockToken): string {
  const { backend, key, owner, fence, ttlMs, cookie } = token
  const json = JSON.stringify({ backend, key, owner, fence: fence.toString(), ttlMs, cookie })
  return PREFIX + Buffer.from(json).toString('base64url')
}

/**
 * The fields of a token made by `encodeToken`. Never echoes the token (it is a secret), only its shape.
 * @throws {TypeError} for anything else, saying what is wrong
 */
export function decodeToken(token: unknown): LockToken {
  if (typeof token !== 'string') {
    throw new TypeError(`Expected a lock token (a string from lock.token()), got ${describeValue(token)}`)
  }
  if (!token.startsWith(PREFIX)) {
    const other = /^fencelock(\d+)\./.exec(token)
    throw new TypeError(
      other
        ? `This lock token is of version ${other[1]}, and this fencelock reads version 1: resume it with the ` +
            'fencelock version that made it'
        : `Expected a lock token from lock.token() (starting "${PREFIX}"), got a string of ${token.length} ` +
            'characters that does not start so',
    )
  }
  let fields: unknown
  try {
    const body = token.slice(PREFIX.length)
    if (!/^[A-Za-z0-9_-]*$/.test(body)) throw new Error('not base64url')
    fields = JSON.parse(Buffer.from(body, 'base64url').toString('utf8'))
  } catch {
    throw new TypeError('This lock token is damaged: its body is not the base64url of JSON. Copy it whole')
  }
  const f = (typeof fields === 'object' && fields !== null ? fields : {}) as Record<string, unknown>
  const bad = (field: string, expected: string) =>
    new TypeError(`This lock token is damaged: its \`${field}\` is not ${expected}. Copy it whole`)
  if (typeof f.backend !== 'string' || f.backend === '') throw bad('backend', "a backend's id")
  if (typeof f.key !== 'string') throw bad('key', 'a string')
  try {
    validateKey(f.key)
  } catch {
    throw bad('key', 'a valid key')
  }
  if (typeof f.owner !== 'string' || f.owner === '') throw bad('owner', 'an owner id')
  if (typeof f.fence !== 'string' || !/^(0|[1-9]\d*)$/.test(f.fence)) throw bad('fence', 'a whole number')
  if (typeof f.ttlMs !== 'number' || !Number.isFinite(f.ttlMs) || f.ttlMs <= 0) {
    throw bad('ttlMs', 'a duration in ms')
  }
  return {
    backend: f.backend,
    key: f.key,
    owner: f.owner,
    fence: BigInt(f.fence),
    ttlMs: f.ttlMs,
    ...(f.cookie === undefined ? {} : { cookie: f.cookie }),
  }
}
