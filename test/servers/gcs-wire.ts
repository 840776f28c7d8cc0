/**
 * The GCS JSON API wire formats for the GCS test server (gcs.ts): the object resource (with the exact
 * `md5Hash` and `crc32c` the SDK validates), the JSON error bodies the SDK parses (`err.code`,
 * `err.errors[0].reason`), precondition evaluation on 64-bit values, `multipart/related` bodies, and the
 * JSON API paths.
 */
import { createHash } from 'node:crypto'
import { crcBase64, type FakeReply } from './http-fake.js'

/** What the server holds for one object name, as tests read it. */
export interface GcsStoredObject {
  readonly body: Buffer
  readonly contentType: string
  readonly metadata: Readonly<Record<string, string>>
  readonly cacheControl?: string | undefined
  readonly generation: bigint
  readonly metageneration: bigint
  readonly timeCreated: Date
  readonly updated: Date
}

/** The writable fields an upload or a patch sets. */
export interface ObjectFields {
  contentType?: string
  metadata?: Record<string, string | null>
  cacheControl?: string
  name?: string
}

const CRC32C_TABLE = Uint32Array.from({ length: 256 }, (_, n) => {
  let c = n
  for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1
  return c >>> 0
})

/** CRC-32C (Castagnoli), which the SDK checks against `crc32c` after each upload. */
function crc32c(bytes: Buffer): number {
  let crc = 0xffffffff
  for (const byte of bytes) crc = CRC32C_TABLE[(crc ^ byte) & 0xff]! ^ (crc >>> 8)
  return (crc ^ 0xffffffff) >>> 0
}

const md5Base64 = (bytes: Buffer) => createHash('md5').update(bytes).digest('base64')

/** The `x-goog-hash` of a download: the SDK validates it when present, so it is exact. */
export const googHash = (body: Buffer) => `crc32c=${crcBase64(crc32c(body))},md5=${md5Base64(body)}`

const JSON_TYPE = 'application/json; charset=UTF-8'

export const jsonReply = (status: number, value: unknown): FakeReply => ({
  status,
  headers: { 'content-type': JSON_TYPE },
  body: JSON.stringify(value),
})

/** A GCS JSON API error: the SDK exposes `err.code` (the status) and `err.errors[0].reason`. */
export function gcsError(
  status: number,
  reason: string,
  message: string,
  extra: Record<string, string> = {},
): FakeReply {
  return jsonReply(status, {
    error: { code: status, message, errors: [{ message, domain: 'global', reason, ...extra }] },
  })
}

export const conditionNotMet = () =>
  gcsError(412, 'conditionNotMet', 'At least one of the pre-conditions you specified did not hold.', {
    locationType: 'header',
    location: 'If-Match',
  })
export const notFound = (what: string) => gcsError(404, 'notFound', `No such object: ${what}`)
export const noBucket = () => gcsError(404, 'notFound', 'The specified bucket does not exist.')
export const notImplemented = (what: string) =>
  gcsError(501, 'notImplemented', `Not implemented by the test server: ${what}`)

export function faultReply(status: number): FakeReply {
  if (status === 409) return gcsError(409, 'conflict', 'The request conflicts with the current state.')
  if (status === 429)
    return gcsError(429, 'rateLimitExceeded', 'The rate of change requests to the object is too high.')
  return gcsError(status, 'backendError', 'Backend Error')
}

const PRECONDITIONS = [
  'ifGenerationMatch',
  'ifGenerationNotMatch',
  'ifMetagenerationMatch',
  'ifMetagenerationNotMatch',
]

/** The 64-bit precondition values of a query, or the name of the first one that is not an integer. */
function preconditions(query: URLSearchParams): Map<string, bigint> | string {
  const values = new Map<string, bigint>()
  for (const name of PRECONDITIONS) {
    const text = query.get(name)
    if (text === null) continue
    if (!/^-?\d+$/.test(text)) return name
    values.set(name, BigInt(text))
  }
  return values
}

/**
 * Evaluates the preconditions against the live object (absent: generation 0). A failed `*NotMatch` on a
 * read is 304; any other failure is 412.
 */
export function preconditionRefusal(
  query: URLSearchParams,
  current: GcsStoredObject | undefined,
  read: boolean,
): FakeReply | undefined {
  const values = preconditions(query)
  if (typeof values === 'string') return gcsError(400, 'invalid', `Invalid value for ${values}`)
  const generation = current?.generation ?? 0n
  const notModified = (): FakeReply => (read ? { status: 304 } : conditionNotMet())
  const want = (name: string) => values.get(name)
  if (want('ifGenerationMatch') !== undefined && want('ifGenerationMatch') !== generation)
    return conditionNotMet()
  if (want('ifGenerationNotMatch') !== undefined && want('ifGenerationNotMatch') === generation)
    return notModified()
  const metageneration = want('ifMetagenerationMatch')
  if (metageneration !== undefined && (!current || metageneration !== current.metageneration)) {
    return conditionNotMet()
  }
  const notMetageneration = want('ifMetagenerationNotMatch')
  if (notMetageneration !== undefined && current && notMetageneration === current.metageneration) {
    return notModified()
  }
  return undefined
}

export function objectResource(bucket: string, object: GcsStoredObject & { name: string }, endpoint: string) {
  const path = `b/${encodeURIComponent(bucket)}/o/${encodeURIComponent(object.name)}`
  const generation = object.generation.toString()
  return {
    kind: 'storage#object',
    id: `${bucket}/${object.name}/${generation}`,
    selfLink: `${endpoint}/storage/v1/${path}`,
    mediaLink: `${endpoint}/download/storage/v1/${path}?generation=${generation}&alt=media`,
    name: object.name,
    bucket,
    generation,
    metageneration: object.metageneration.toString(),
    contentType: object.contentType,
    storageClass: 'STANDARD',
    size: String(object.body.length),
    md5Hash: md5Base64(object.body),
    crc32c: crcBase64(crc32c(object.body)),
    etag: Buffer.from(`${generation}/${object.metageneration}`).toString('base64'),
    timeCreated: object.timeCreated.toISOString(),
    updated: object.updated.toISOString(),
    ...(object.cacheControl === undefined ? {} : { cacheControl: object.cacheControl }),
    ...(Object.keys(object.metadata).length === 0 ? {} : { metadata: object.metadata }),
  }
}

/** Splits a `multipart/related` body into its parts (headers in lower case, the bytes). */
export function multipartParts(
  contentType: string,
  body: Buffer,
): { type: string; bytes: Buffer }[] | undefined {
  const boundary = /boundary="?([^";]+)"?/i.exec(contentType)?.[1]
  if (!boundary) return undefined
  const delimiter = Buffer.from(`--${boundary}`)
  const parts: { type: string; bytes: Buffer }[] = []
  let at = body.indexOf(delimiter)
  while (at >= 0) {
    const start = at + delimiter.length
    if (body.subarray(start, start + 2).toString() === '--') break
    const next = body.indexOf(delimiter, start)
    if (next < 0) return undefined
    const part = body.subarray(start, next)
    const split = part.indexOf('\r\n\r\n')
    if (split < 0) return undefined
    const headers = part.subarray(0, split).toString('latin1')
    const type = /content-type:\s*([^\r\n]+)/i.exec(headers)?.[1]?.trim() ?? 'application/octet-stream'
    // The part's bytes end before the CRLF that precedes the next delimiter.
    parts.push({ type, bytes: part.subarray(split + 4, part.length - 2) })
    at = next
  }
  return parts
}

/** `/storage/v1/b/{b}/o/{o}` and its /upload and /download forms, the object name one encoded segment. */
export function route(
  path: string,
): { api: string; bucket?: string; objects: boolean; name?: string } | undefined {
  const match =
    /^\/(storage|upload\/storage|download\/storage)\/v1\/b(?:\/([^/]+)(?:\/(o)(?:\/([^/]+))?)?)?$/.exec(path)
  if (!match) return undefined
  const [, api, bucket, objects, name] = match
  return {
    api: api!,
    ...(bucket === undefined ? {} : { bucket: decodeURIComponent(bucket) }),
    objects: objects !== undefined,
    ...(name === undefined ? {} : { name: decodeURIComponent(name) }),
  }
}

export function parseJson(body: Buffer): ObjectFields | undefined {
  if (body.length === 0) return {}
  try {
    const value: unknown = JSON.parse(body.toString('utf8'))
    return typeof value === 'object' && value !== null ? (value as ObjectFields) : undefined
  } catch {
    return undefined
  }
}

export const invalidJson = () => gcsError(400, 'parseError', 'Parse Error')

/** The object with the writable `fields` applied: metadata merges (`null` deletes a key), others replace. */
export function patchedFields<T extends Pick<GcsStoredObject, 'contentType' | 'metadata' | 'cacheControl'>>(
  object: T,
  fields: ObjectFields,
): T {
  const metadata: Record<string, string> = { ...object.metadata }
  for (const [key, value] of Object.entries(fields.metadata ?? {})) {
    if (value === null) delete metadata[key]
    else metadata[key] = String(value)
  }
  return {
    ...object,
    metadata,
    ...(fields.contentType === undefined ? {} : { contentType: fields.contentType }),
    ...(fields.cacheControl === undefined ? {} : { cacheControl: fields.cacheControl }),
  }
}
