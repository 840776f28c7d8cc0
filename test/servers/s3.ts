/**
 * A faithful S3 test server, in-process (node:http on 127.0.0.1, port 0), built to
 * shared/research/cloud-backends.md Part C.1. The S3 backend is tested against this server, NOT against
 * AWS: no installable emulator honours S3's conditional writes (s3rver and others ignore them).
 * Clients: `new S3Client({ endpoint, forcePathStyle: true, region: 'any', credentials: dummy })`.
 *
 * Faithful (checked with `@aws-sdk/client-s3` in s3.test.ts, T1-T9):
 * - path-style `/{bucket}/{key}` (each key segment percent-decoded), `x-id` ignored, auth ignored;
 * - CreateBucket, HeadBucket, PutObject, GetObject, HeadObject (404 without body), DeleteObject, and
 *   multipart upload (Create, UploadPart, Complete, Abort) with the conditions checked at Complete;
 * - `If-None-Match: *` (412 PreconditionFailed when the key exists; another value: 400 InvalidArgument or
 *   501 NotImplemented, see settings), `If-Match: <etag>` (412; absent key: 404 NoSuchKey or 412), conditional
 *   DeleteObject (`If-Match` etag or `*`, `x-amz-if-match-last-modified-time`, `x-amz-if-match-size`; absent
 *   key: 204 or 404 NoSuchKey), 409 ConditionalRequestConflict when a DELETE of the key commits while a
 *   conditional request is in flight (between its arrival and its commit), GET `If-Match`/`If-None-Match`;
 * - the XML error bodies the SDK parses into `err.name` / `$metadata.httpStatusCode`;
 * - ETag = quoted MD5 hex of the body, `"md5(part md5s)-N"` for multipart, or random (settings);
 * - aws-chunked stream bodies decoded (length and trailer CRC32 checked), CRC32 checked (400 BadDigest);
 * - the conditional check and the write are one synchronous step (http-fake.ts), so races have one winner.
 * Not implemented (C.3): auth, ACLs, signed URLs, SSE, versioning, object lock, lifecycle, CORS, ranges,
 * CopyObject, ListObjects, virtual-hosted style, S3 Express CreateSession. Unknown requests get 501.
 * The file is longer than 300 lines because it is one wire dialect; the shell is http-fake.ts.
 */
import { createHash, randomBytes } from 'node:crypto'
import { crc32 } from 'node:zlib'
import {
  type Commit,
  crcBase64,
  type Dialect,
  type FakeReply,
  type FakeRequest,
  type FakeServer,
  startHttpFake,
} from './http-fake.js'

/** The behaviours AWS's docs leave open; mutable on a running server, so one test can try both. */
export interface S3Settings {
  /** Status of a PutObject/Complete `If-Match` on an absent key. @default 404 (NoSuchKey) */
  ifMatchAbsent: 404 | 412
  /** Status of a DeleteObject `If-Match` on an absent key. @default 204 (the API reference's text) */
  deleteAbsent: 204 | 404
  /** Status of `If-None-Match` with a value other than `*`. @default 400 (InvalidArgument) */
  ifNoneMatchOther: 400 | 501
  /** Random ETags instead of MD5 (as S3 Express One Zone and SSE-KMS give). @default false */
  randomEtags: boolean
}

/** What the server holds for one key, as tests read it. */
export interface S3StoredObject {
  readonly body: Buffer
  readonly etag: string
  readonly contentType: string
  readonly metadata: Readonly<Record<string, string>>
  readonly lastModified: Date
}

/** A running S3 test server. */
export interface S3Fake extends FakeServer {
  readonly settings: S3Settings
  /** Creates a bucket (as CreateBucket would); an existing one is kept as is. */
  createBucket(name: string): void
  /** The stored object, or undefined: for a test's assertions, bypassing HTTP and faults. */
  peek(bucket: string, key: string): S3StoredObject | undefined
}

interface StoredObject extends S3StoredObject {
  /** CRC32 of a single-part body (multipart objects have a composite checksum, not kept). */
  readonly crc32?: string
}

interface Upload {
  readonly key: string
  readonly contentType: string
  readonly metadata: Record<string, string>
  readonly parts: Map<number, { readonly body: Buffer; readonly md5: Buffer }>
}

class Bucket {
  constructor(readonly name: string) {}
  readonly objects = new Map<string, StoredObject>()
  /** Per key: how many DELETEs committed; a conditional request that sees it change in flight gets 409. */
  readonly deletes = new Map<string, number>()
  readonly uploads = new Map<string, Upload>()
}

const XMLNS = 'http://s3.amazonaws.com/doc/2006-03-01/'

const escapeXml = (text: string) =>
  text.replace(/[<>&"']/g, (c) => `&${{ '<': 'lt', '>': 'gt', '&': 'amp', '"': 'quot', "'": 'apos' }[c]};`)

const unescapeXml = (text: string) =>
  text.replace(
    /&(lt|gt|amp|quot|apos);/g,
    (_, n: string) => ({ lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" })[n]!,
  )

const requestId = () => randomBytes(8).toString('hex').toUpperCase()

function xmlReply(status: number, root: string, fields: Record<string, string>): FakeReply {
  const inner = Object.entries(fields)
    .map(([name, value]) => `<${name}>${escapeXml(value)}</${name}>`)
    .join('')
  return {
    status,
    headers: { 'content-type': 'application/xml', 'x-amz-request-id': requestId() },
    body: `<?xml version="1.0" encoding="UTF-8"?>\n<${root} xmlns="${XMLNS}">${inner}</${root}>`,
  }
}

/** An S3 error: `<Code>` becomes the SDK's `err.name`, extra elements become properties. */
function s3Error(
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

const preconditionFailed = (condition: string) =>
  s3Error(412, 'PreconditionFailed', 'At least one of the pre-conditions you specified did not hold', {
    Condition: condition,
  })
const noSuchKey = (key: string) =>
  s3Error(404, 'NoSuchKey', 'The specified key does not exist.', { Key: key })
const noSuchUpload = (id: string) =>
  s3Error(404, 'NoSuchUpload', 'The specified upload does not exist.', { UploadId: id })
const conflict = () =>
  s3Error(
    409,
    'ConditionalRequestConflict',
    'A conflicting operation occurred. If using PutObject you can retry the request.',
  )
const notImplemented = (what: string) =>
  s3Error(
    501,
    'NotImplemented',
    `A header or operation you provided implies functionality not implemented: ${what}`,
  )

/** The error bodies of injected failures (503 SlowDown is what S3 sends under load; the SDK retries it). */
function faultReply(status: number): FakeReply {
  if (status === 409) return conflict()
  if (status === 500)
    return s3Error(500, 'InternalError', 'We encountered an internal error. Please try again.')
  return s3Error(status, 'SlowDown', 'Please reduce your request rate.')
}

/** Strong comparison of opaque ETags, tolerant of missing quotes on either side; `*` matches any. */
const etagMatches = (header: string, etag: string) => {
  const bare = (value: string) => value.trim().replace(/^W\//, '').replace(/^"|"$/g, '')
  return header.split(',').some((one) => one.trim() === '*' || bare(one) === bare(etag))
}

const md5 = (bytes: Buffer) => createHash('md5').update(bytes).digest()

function header(request: FakeRequest, name: string): string | undefined {
  const value = request.headers[name]
  return Array.isArray(value) ? value.join(',') : value
}

function userMetadata(request: FakeRequest): Record<string, string> {
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
function payload(request: FakeRequest, raw: Buffer): { data: Buffer; crc32: string } | FakeReply {
  let data = raw
  let sentCrc = header(request, 'x-amz-checksum-crc32')
  if (header(request, 'content-encoding')?.includes('aws-chunked')) {
    const decoded = decodeAwsChunked(raw)
    const declared = Number(header(request, 'x-amz-decoded-content-length') ?? Number.NaN)
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

const isReply = (value: object): value is FakeReply => 'status' in value

/** Path style: `/{bucket}/{key…}`, each key segment percent-decoded (the SDK keeps `/`). */
function address(path: string): { bucket: string; key: string } {
  const [bucket = '', ...key] = path.slice(1).split('/')
  return { bucket: decodeURIComponent(bucket), key: key.map(decodeURIComponent).join('/') }
}

function objectHeaders(object: StoredObject, request: FakeRequest): Record<string, string> {
  const headers: Record<string, string> = {
    etag: object.etag,
    'last-modified': object.lastModified.toUTCString(),
    'content-type': object.contentType,
    'accept-ranges': 'bytes',
    'x-amz-request-id': requestId(),
    ...object.metadata,
  }
  if (object.crc32 && header(request, 'x-amz-checksum-mode') === 'ENABLED') {
    headers['x-amz-checksum-crc32'] = object.crc32
    headers['x-amz-checksum-type'] = 'FULL_OBJECT'
  }
  return headers
}

/** The S3 dialect: routes a request to its operation over the buckets. */
class S3Dialect implements Dialect {
  lax = false
  readonly buckets = new Map<string, Bucket>()

  constructor(readonly settings: S3Settings) {}

  faultReply(status: number): FakeReply {
    return faultReply(status)
  }

  arrive(request: FakeRequest): Commit {
    const { bucket, key } = address(request.path)
    if (!bucket) return () => notImplemented('ListBuckets')
    if (!key) return (body) => this.#bucketOperation(request, bucket, body)
    // Noted at arrival: a DELETE of this key that commits before our commit makes a conditional request 409.
    const deletesAtArrival = this.buckets.get(bucket)?.deletes.get(key) ?? 0
    return (body) => {
      const store = this.buckets.get(bucket)
      if (!store)
        return s3Error(404, 'NoSuchBucket', 'The specified bucket does not exist', { BucketName: bucket })
      const conditional =
        header(request, 'if-match') !== undefined || header(request, 'if-none-match') !== undefined
      if (conditional && !this.lax && request.method !== 'GET' && request.method !== 'HEAD') {
        if ((store.deletes.get(key) ?? 0) !== deletesAtArrival) return conflict()
      }
      return this.#objectOperation(request, store, key, body)
    }
  }

  #bucketOperation(request: FakeRequest, name: string, _body: Buffer): FakeReply {
    if (request.method === 'PUT') {
      if (this.buckets.has(name)) {
        return s3Error(
          409,
          'BucketAlreadyOwnedByYou',
          'Your previous request to create the named bucket succeeded.',
        )
      }
      this.buckets.set(name, new Bucket(name))
      return { status: 200, headers: { location: `/${name}`, 'x-amz-request-id': requestId() } }
    }
    if (request.method === 'HEAD') return { status: this.buckets.has(name) ? 200 : 404 }
    return notImplemented(`${request.method} on a bucket`)
  }

  #objectOperation(request: FakeRequest, bucket: Bucket, key: string, body: Buffer): FakeReply {
    const { method, query } = request
    if (method === 'PUT' && query.has('uploadId')) return this.#uploadPart(request, bucket, body)
    if (method === 'PUT' && header(request, 'x-amz-copy-source')) return notImplemented('CopyObject')
    if (method === 'PUT') return this.#putObject(request, bucket, key, body)
    if (method === 'GET' || method === 'HEAD') return this.#getObject(request, bucket, key)
    if (method === 'DELETE' && query.has('uploadId')) return this.#abortUpload(bucket, query.get('uploadId')!)
    if (method === 'DELETE') return this.#deleteObject(request, bucket, key)
    if (method === 'POST' && query.has('uploads')) return this.#createUpload(request, bucket, key)
    if (method === 'POST' && query.has('uploadId')) return this.#completeUpload(request, bucket, key, body)
    return notImplemented(`${method} on an object`)
  }

  /** The write conditions (PutObject, CompleteMultipartUpload), against the live object at commit. */
  #writeRefusal(request: FakeRequest, current: StoredObject | undefined, key: string): FakeReply | undefined {
    if (this.lax) return undefined
    const ifNoneMatch = header(request, 'if-none-match')
    if (ifNoneMatch !== undefined) {
      if (ifNoneMatch.trim() !== '*') {
        return this.settings.ifNoneMatchOther === 501
          ? notImplemented('If-None-Match other than *')
          : s3Error(400, 'InvalidArgument', 'If-None-Match only accepts the * character', {
              ArgumentName: 'If-None-Match',
            })
      }
      if (current) return preconditionFailed('If-None-Match')
    }
    const ifMatch = header(request, 'if-match')
    if (ifMatch !== undefined) {
      if (!current)
        return this.settings.ifMatchAbsent === 412 ? preconditionFailed('If-Match') : noSuchKey(key)
      if (!etagMatches(ifMatch, current.etag)) return preconditionFailed('If-Match')
    }
    return undefined
  }

  #etag(hex: string): string {
    return `"${this.settings.randomEtags ? randomBytes(16).toString('hex') : hex}"`
  }

  #putObject(request: FakeRequest, bucket: Bucket, key: string, raw: Buffer): FakeReply {
    const body = payload(request, raw)
    if (isReply(body)) return body
    const refusal = this.#writeRefusal(request, bucket.objects.get(key), key)
    if (refusal) return refusal
    const object: StoredObject = {
      body: body.data,
      etag: this.#etag(md5(body.data).toString('hex')),
      contentType: header(request, 'content-type') ?? 'binary/octet-stream',
      metadata: userMetadata(request),
      lastModified: new Date(),
      crc32: body.crc32,
    }
    bucket.objects.set(key, object)
    const headers: Record<string, string> = { etag: object.etag, 'x-amz-request-id': requestId() }
    if (header(request, 'x-amz-checksum-crc32') || header(request, 'x-amz-trailer')) {
      headers['x-amz-checksum-crc32'] = body.crc32
    }
    return { status: 200, headers }
  }

  #getObject(request: FakeRequest, bucket: Bucket, key: string): FakeReply {
    const object = bucket.objects.get(key)
    // A HEAD 404 has no body: the SDK then reports `name: 'NotFound'` (the shell drops HEAD bodies).
    if (!object) return noSuchKey(key)
    const ifMatch = header(request, 'if-match')
    const ifNoneMatch = header(request, 'if-none-match')
    if (!this.lax && ifMatch !== undefined && !etagMatches(ifMatch, object.etag))
      return preconditionFailed('If-Match')
    if (!this.lax && ifNoneMatch !== undefined && etagMatches(ifNoneMatch, object.etag)) {
      return { status: 304, headers: { etag: object.etag } }
    }
    return { status: 200, headers: objectHeaders(object, request), body: object.body }
  }

  #deleteObject(request: FakeRequest, bucket: Bucket, key: string): FakeReply {
    const object = bucket.objects.get(key)
    const ifMatch = header(request, 'if-match')
    if (!this.lax && ifMatch !== undefined && !object && this.settings.deleteAbsent === 404)
      return noSuchKey(key)
    if (!this.lax && object) {
      if (ifMatch !== undefined && !etagMatches(ifMatch, object.etag)) return preconditionFailed('If-Match')
      const time = header(request, 'x-amz-if-match-last-modified-time')
      if (
        time !== undefined &&
        Date.parse(time) !== Math.floor(object.lastModified.getTime() / 1000) * 1000
      ) {
        return preconditionFailed('x-amz-if-match-last-modified-time')
      }
      const size = header(request, 'x-amz-if-match-size')
      if (size !== undefined && Number(size) !== object.body.length)
        return preconditionFailed('x-amz-if-match-size')
    }
    if (object) {
      bucket.objects.delete(key)
      bucket.deletes.set(key, (bucket.deletes.get(key) ?? 0) + 1)
    }
    return { status: 204, headers: { 'x-amz-request-id': requestId() } }
  }

  #createUpload(request: FakeRequest, bucket: Bucket, key: string): FakeReply {
    const id = randomBytes(16).toString('hex')
    const contentType = header(request, 'content-type') ?? 'binary/octet-stream'
    bucket.uploads.set(id, { key, contentType, metadata: userMetadata(request), parts: new Map() })
    return xmlReply(200, 'InitiateMultipartUploadResult', { Bucket: bucket.name, Key: key, UploadId: id })
  }

  #uploadPart(request: FakeRequest, bucket: Bucket, raw: Buffer): FakeReply {
    const id = request.query.get('uploadId')!
    const upload = bucket.uploads.get(id)
    if (!upload) return noSuchUpload(id)
    const number = Number(request.query.get('partNumber'))
    if (!Number.isInteger(number) || number < 1 || number > 10_000) {
      return s3Error(400, 'InvalidArgument', 'Part number must be an integer between 1 and 10000, inclusive')
    }
    const body = payload(request, raw)
    if (isReply(body)) return body
    const digest = md5(body.data)
    upload.parts.set(number, { body: body.data, md5: digest })
    return { status: 200, headers: { etag: `"${digest.toString('hex')}"`, 'x-amz-request-id': requestId() } }
  }

  #completeUpload(request: FakeRequest, bucket: Bucket, key: string, raw: Buffer): FakeReply {
    const id = request.query.get('uploadId')!
    const upload = bucket.uploads.get(id)
    if (!upload || upload.key !== key) return noSuchUpload(id)
    const listed = [...raw.toString('utf8').matchAll(/<Part>([\s\S]*?)<\/Part>/g)].map(([, part]) => ({
      number: Number(/<PartNumber>(\d+)<\/PartNumber>/.exec(part!)?.[1]),
      etag: unescapeXml(/<ETag>([\s\S]*?)<\/ETag>/.exec(part!)?.[1] ?? ''),
    }))
    if (listed.length === 0) return s3Error(400, 'MalformedXML', 'The XML you provided was not well-formed.')
    const parts = []
    for (const [index, { number, etag }] of listed.entries()) {
      const part = upload.parts.get(number)
      if (!part || !etagMatches(etag, part.md5.toString('hex'))) {
        return s3Error(400, 'InvalidPart', 'One or more of the specified parts could not be found.')
      }
      if (index > 0 && number <= listed[index - 1]!.number) {
        return s3Error(400, 'InvalidPartOrder', 'The list of parts was not in ascending order.')
      }
      parts.push(part)
    }
    // Uploads in progress are not objects: the conditions are checked now, against the live key.
    const refusal = this.#writeRefusal(request, bucket.objects.get(key), key)
    if (refusal) return refusal
    const combined = md5(Buffer.concat(parts.map((p) => p.md5))).toString('hex')
    const object: StoredObject = {
      body: Buffer.concat(parts.map((p) => p.body)),
      etag: this.#etag(`${combined}-${parts.length}`),
      contentType: upload.contentType,
      metadata: upload.metadata,
      lastModified: new Date(),
    }
    bucket.objects.set(key, object)
    bucket.uploads.delete(id)
    return xmlReply(200, 'CompleteMultipartUploadResult', {
      Location: `/${bucket.name}/${key}`,
      Bucket: bucket.name,
      Key: key,
      ETag: object.etag,
    })
  }

  #abortUpload(bucket: Bucket, id: string): FakeReply {
    if (!bucket.uploads.delete(id)) return noSuchUpload(id)
    return { status: 204, headers: { 'x-amz-request-id': requestId() } }
  }
}

/** Starts an S3 test server on 127.0.0.1 (a fresh port) with no buckets. */
export async function startS3Fake(settings: Partial<S3Settings> = {}): Promise<S3Fake> {
  const dialect = new S3Dialect({
    ifMatchAbsent: 404,
    deleteAbsent: 204,
    ifNoneMatchOther: 400,
    randomEtags: false,
    ...settings,
  })
  const server = await startHttpFake(dialect)
  return Object.assign(server, {
    settings: dialect.settings,
    createBucket: (name: string) => {
      if (!dialect.buckets.has(name)) dialect.buckets.set(name, new Bucket(name))
    },
    peek: (bucket: string, key: string): S3StoredObject | undefined =>
      dialect.buckets.get(bucket)?.objects.get(key),
  })
}
