/**
 * The S3 wire formats for the S3 test server (s3.ts): XML replies and the error bodies the SDK parses
 * (`<Code>` becomes `err.name`), ETag comparison, `x-amz-meta-*` headers, path-style addresses, and request
 * bodies (plain or aws-chunked, CRC32 checked).
 */
import { createHash, randomBytes } from 'node:crypto'
import { crc32 } from 'node:zlib'
import { crcBase64, type FakeReply, type FakeRequest, headerOf } from './http-fake.js'

const XMLNS = 'http://s3.amazonaws.com/doc/2006-03-01/'

const escapeXml = (text: string) =>
  text.replace(/[<>&"']/g, (c) => `&${{ '<': 'lt', '>': 'gt', '&': 'amp', '"': 'quot', "'": 'apos' }[c]};`)

export const unescapeXml = (text: string) =>
  text.replace(
    /&(lt|gt|amp|quot|apos);/g,
    (_, n: string) => ({ lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" })[n]!,
  )

export const requestId = () => randomBytes(8).toString('hex').toUpperCase()

/** `<Name>value</Name>…` for each field, the values escaped. */
export const xmlElements = (fields: Record<string, string>) =>
  Object.entries(fields)
    .map(([name, value]) => `<${name}>${escapeXml(value)}</${name}>`)
    .join('')

/** An XML result document: its fields, then `children` (already XML). */
export function xmlReply(
  status: number,
  root: string,
  fields: Record<string, string>,
  children = '',
): FakeReply {
  const inner = xmlElements(fields) + children
  return {
    status,
    headers: { 'content-type': 'application/xml', 'x-amz-request-id': requestId() },
    body: `<?xml version="1.0" encoding="UTF-8"?>\n<${root} xmlns="${XMLNS}">${inner}</${root}>`,
  }
}

/** An S3 error: `<Code>` becomes the SDK's `err.name`, extra elements become properties. */
export function s3Error(
  status: number,
  code: string,
  message: string,
  extra: Record<string, string> = {},
): FakeReply {
  const id = requestId()
  return {
    status,
    headers: { 'content-type': 'application/xml', 'x-amz-request-id': id },
    body:
      `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${escapeXml(message)}</Message>` +
      `${Object.entries(extra)
        .map(([n, v]) => `<${n}>${escapeXml(v)}</${n}>`)
        .join('')}<RequestId>${id}</RequestId><HostId>${randomBytes(12).toString('base64')}</HostId></Error>`,
  }
}

export const preconditionFailed = (condition: string) =>
  s3Error(412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', {
    Condition: condition,
  })
export const noSuchKey = (key: string) =>
  s3Error(404, 'NoSuchKey', 'The specified key does not exist.', { Key: key })
export const noSuchUpload = (id: string) =>
  s3Error(404, 'NoSuchUpload', 'The specified upload does not exist.', { UploadId: id })
export const conflict = () =>
  s3Error(
    409,
    'ConditionalRequestConflict',
    'A conflicting operation occurred. If using PutObject you can retry the request.',
  )
export const notImplemented = (what: string) =>
  s3Error(
    501,
    'NotImplemented',
    `A header or operation you provided implies functionality not implemented: ${what}`,
  )

/** The error bodies of injected failures (503 SlowDown is what S3 sends under load; the SDK retries it). */
export function faultReply(status: number): FakeReply {
  if (status === 409) return conflict()
  if (status === 500)
    return s3Error(500, 'InternalError', 'We encountered an internal error. Please try again.')
  return s3Error(status, 'SlowDown', 'Please reduce your request rate.')
}

/** Strong comparison of opaque ETags, tolerant of missing quotes on either side; `*` matches any. */
export const etagMatches = (header: string, etag: string) => {
  const bare = (value: string) => value.trim().replace(/^W\//, '').replace(/^"|"$/g, '')
  return header.split(',').some((one) => one.trim() === '*' || bare(one) === bare(etag))
}

export const md5 = (bytes: Buffer) => createHash('md5').update(bytes).digest()

export function userMetadata(request: FakeRequest): Record<string, string> {
  const metadata: Record<string, string> = {}
  for (const [name, value] of Object.entries(request.headers)) {
    if (name.startsWith('x-amz-meta-') && value !== undefined) metadata[name] = String(value)
  }
  return metadata
}

/**
 * Decodes an aws-chunked body: `<hex-size>[;chunk-signature=…]\r\n<bytes>\r\n … 0\r\n<trailers>\r\n\r\n`.
 * Returns the data and the trailer headers (lower-case names), or undefined when the framing is broken.
 */
function decodeAwsChunked(raw: Buffer): { data: Buffer; trailers: Record<string, string> } | undefined {
  const chunks: Buffer[] = []
  let at = 0
  while (at < raw.length) {
    const lineEnd = raw.indexOf('\r\n', at)
    if (lineEnd < 0) return undefined
    const size = Number.parseInt(raw.subarray(at, lineEnd).toString('latin1').split(';')[0]!, 16)
    if (!Number.isFinite(size)) return undefined
    at = lineEnd + 2
    if (size === 0) break
    chunks.push(raw.subarray(at, at + size))
    at += size + 2
  }
  const trailers: Record<string, string> = {}
  for (const line of raw.subarray(at).toString('latin1').split('\r\n')) {
    const colon = line.indexOf(':')
    if (colon > 0) trailers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { data: Buffer.concat(chunks), trailers }
}

/** The payload of a PUT (plain or aws-chunked) with its checksums verified, or the 400 to answer. */
export function payload(request: FakeRequest, raw: Buffer): { data: Buffer; crc32: string } | FakeReply {
  let data = raw
  let sentCrc = headerOf(request, 'x-amz-checksum-crc32')
  if (headerOf(request, 'content-encoding')?.includes('aws-chunked')) {
    const decoded = decodeAwsChunked(raw)
    const declared = Number(headerOf(request, 'x-amz-decoded-content-length') ?? Number.NaN)
    if (!decoded || decoded.data.length !== declared) {
      return s3Error(
        400,
        'IncompleteBody',
        'You did not provide the number of bytes specified by the header.',
      )
    }
    data = decoded.data
    sentCrc = decoded.trailers['x-amz-checksum-crc32'] ?? sentCrc
  }
  const actual = crcBase64(crc32(data))
  if (sentCrc !== undefined && sentCrc !== actual) {
    return s3Error(400, 'BadDigest', 'The CRC32 you specified did not match the calculated checksum.')
  }
  return { data, crc32: actual }
}

export const isReply = (value: object): value is FakeReply => 'status' in value

/** Path style: `/{bucket}/{key…}`, each key segment percent-decoded (the SDK keeps `/`). */
export function address(path: string): { bucket: string; key: string } {
  const [bucket = '', ...key] = path.slice(1).split('/')
  return { bucket: decodeURIComponent(bucket), key: key.map(decodeURIComponent).join('/') }
}
