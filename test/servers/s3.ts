/**
 * A faithful S3 test server, in-process (node:http on 127.0.0.1, port 0), built to
 * shared/research/cloud-backends.md Part C.1. The S3 backend is tested against this server, NOT against
 * AWS: no installable emulator honours S3's conditional writes (s3rver and others ignore them).
 * Clients: `new S3Client({ endpoint, forcePathStyle: true, region: 'any', credentials: dummy })`.
 *
 * Faithful (checked with `@aws-sdk/client-s3` in s3.test.ts, T1-T9):
 * - path-style `/{bucket}/{key}` (each key segment percent-decoded), `x-id` ignored;
 * - CreateBucket, HeadBucket, ListObjectsV2 (prefix, pages), Put/Get/DeleteBucketLifecycleConfiguration
 *   (kept and returned, not applied), PutObject, GetObject, HeadObject (404
 *   without a body), DeleteObject, and multipart upload (Create, UploadPart, Complete, Abort) with the
 *   conditions checked at Complete;
 * - `If-None-Match: *` (412 PreconditionFailed when the key exists; another value: 400 InvalidArgument or
 *   501 NotImplemented, see settings), `If-Match: <etag>` (412; absent key: 404 NoSuchKey or 412), conditional
 *   DeleteObject (`If-Match` etag or `*`, `x-amz-if-match-last-modified-time`, `x-amz-if-match-size`; absent
 *   key: 204 or 404 NoSuchKey), 409 ConditionalRequestConflict when a DELETE of the key commits while a
 *   conditional request is in flight (between its arrival and its commit), GET `If-Match`/`If-None-Match`;
 * - the XML error bodies the SDK parses into `err.name` / `$metadata.httpStatusCode`;
 * - ETag = quoted MD5 hex of the body, `"md5(part md5s)-N"` for multipart, or random (settings);
 * - aws-chunked stream bodies decoded (length and trailer CRC32 checked), CRC32 checked (400 BadDigest);
 * - the conditional check and the write are one synchronous step (http-fake.ts), so races have one winner.
 * Not implemented (C.3): auth (any signature is accepted; one access key id can be set to get 403),
 * ACLs, signed URLs, SSE, versioning, object lock, applying lifecycle rules, CORS, ranges, CopyObject, ListObjects v1,
 * virtual-hosted style, S3 Express CreateSession. Unknown requests get 501.
 * Files: this one holds the operations and the state (a little over 300 lines: one operation per
 * method, kept together so each conditional rule reads beside its write); s3-wire.ts the XML, errors and
 * bodies; http-fake.ts the HTTP shell; fake-faults.ts the fault switches.
 */
import { randomBytes } from 'node:crypto'
import {
  BucketDialect,
  type Commit,
  type FakeReply,
  type FakeRequest,
  type FakeServer,
  headerOf,
  startHttpFake,
} from './http-fake.js'
import {
  address,
  conflict,
  etagMatches,
  faultReply,
  isReply,
  md5,
  noSuchKey,
  noSuchUpload,
  notImplemented,
  payload,
  preconditionFailed,
  requestId,
  s3Error,
  unescapeXml,
  userMetadata,
  xmlElements,
  xmlReply,
} from './s3-wire.js'

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
  /**
   * Requests signed with this access key id get 403 InvalidAccessKeyId (every other key is accepted
   * unchecked), to test how a client reports bad credentials. @default undefined (all accepted)
   */
  rejectAccessKeyId: string | undefined
}

/** What the server holds for one key, as tests read it. */
export interface S3StoredObject {
  readonly body: Buffer
  readonly etag: string
  readonly contentType: string
  readonly metadata: Readonly<Record<string, string>>
  readonly lastModified: Date
}

/** A running S3 test server: `settings`, `createBucket(name)` and `peek(bucket, key)` come with it. */
export type S3Fake = FakeServer<S3Settings, S3StoredObject>

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
  /** The bucket's lifecycle configuration, as the XML a PutBucketLifecycleConfiguration sent. */
  lifecycle: string | undefined
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
  if (object.crc32 && headerOf(request, 'x-amz-checksum-mode') === 'ENABLED') {
    headers['x-amz-checksum-crc32'] = object.crc32
    headers['x-amz-checksum-type'] = 'FULL_OBJECT'
  }
  return headers
}

/** The S3 dialect: routes a request to its operation over the buckets. */
class S3Dialect extends BucketDialect<S3Settings, S3StoredObject, Bucket> {
  faultReply(status: number): FakeReply {
    return faultReply(status)
  }

  arrive(request: FakeRequest): Commit {
    const accessKeyId = /Credential=([^/]+)\//.exec(headerOf(request, 'authorization') ?? '')?.[1]
    if (accessKeyId !== undefined && accessKeyId === this.settings.rejectAccessKeyId) {
      return () =>
        s3Error(
          403,
          'InvalidAccessKeyId',
          'The AWS Access Key Id you provided does not exist in our records.',
          {
            AWSAccessKeyId: accessKeyId,
          },
        )
    }
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
        headerOf(request, 'if-match') !== undefined || headerOf(request, 'if-none-match') !== undefined
      if (conditional && !this.lax && request.method !== 'GET' && request.method !== 'HEAD') {
        if ((store.deletes.get(key) ?? 0) !== deletesAtArrival) return conflict()
      }
      return this.#objectOperation(request, store, key, body)
    }
  }

  #bucketOperation(request: FakeRequest, name: string, body: Buffer): FakeReply {
    if (request.query.has('lifecycle')) return this.#lifecycle(request, name, body)
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
    if (request.method === 'GET' && request.query.get('list-type') === '2')
      return this.#listObjects(request, name)
    return notImplemented(`${request.method} on a bucket`)
  }

  /**
   * Put/Get/DeleteBucketLifecycleConfiguration: the XML is kept as sent and given back as is (the SDK
   * writes and reads the same `<LifecycleConfiguration>` document); rules are not applied (nothing expires).
   */
  #lifecycle(request: FakeRequest, name: string, body: Buffer): FakeReply {
    const bucket = this.buckets.get(name)
    if (!bucket)
      return s3Error(404, 'NoSuchBucket', 'The specified bucket does not exist', { BucketName: name })
    if (request.method === 'PUT') {
      bucket.lifecycle = body.toString('utf8')
      return { status: 200, headers: { 'x-amz-request-id': requestId() } }
    }
    if (request.method === 'DELETE') {
      bucket.lifecycle = undefined
      return { status: 204, headers: { 'x-amz-request-id': requestId() } }
    }
    if (request.method !== 'GET') return notImplemented(`${request.method} ?lifecycle`)
    if (bucket.lifecycle === undefined) {
      return s3Error(404, 'NoSuchLifecycleConfiguration', 'The lifecycle configuration does not exist', {
        BucketName: name,
      })
    }
    return {
      status: 200,
      headers: { 'content-type': 'application/xml', 'x-amz-request-id': requestId() },
      body: bucket.lifecycle,
    }
  }

  /** ListObjectsV2 by prefix, in key order; the continuation token is the last key of the page. */
  #listObjects(request: FakeRequest, name: string): FakeReply {
    const bucket = this.buckets.get(name)
    if (!bucket)
      return s3Error(404, 'NoSuchBucket', 'The specified bucket does not exist', { BucketName: name })
    const prefix = request.query.get('prefix') ?? ''
    const after = request.query.get('continuation-token') ?? request.query.get('start-after') ?? ''
    const max = Number(request.query.get('max-keys') ?? 1000)
    const keys = [...bucket.objects.keys()].filter((k) => k.startsWith(prefix) && k > after).sort()
    const page = keys.slice(0, max)
    const contents = page.map((key) => {
      const object = bucket.objects.get(key)!
      const fields = {
        Key: key,
        LastModified: object.lastModified.toISOString(),
        ETag: object.etag,
        Size: String(object.body.length),
        StorageClass: 'STANDARD',
      }
      return `<Contents>${xmlElements(fields)}</Contents>`
    })
    const truncated = keys.length > page.length
    const fields = {
      Name: name,
      Prefix: prefix,
      KeyCount: String(page.length),
      MaxKeys: String(max),
      IsTruncated: String(truncated),
      ...(truncated ? { NextContinuationToken: page.at(-1)! } : {}),
    }
    return xmlReply(200, 'ListBucketResult', fields, contents.join(''))
  }

  #objectOperation(request: FakeRequest, bucket: Bucket, key: string, body: Buffer): FakeReply {
    const { method, query } = request
    if (method === 'PUT' && query.has('uploadId')) return this.#uploadPart(request, bucket, body)
    if (method === 'PUT' && headerOf(request, 'x-amz-copy-source')) return notImplemented('CopyObject')
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
    const ifNoneMatch = headerOf(request, 'if-none-match')
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
    const ifMatch = headerOf(request, 'if-match')
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
      contentType: headerOf(request, 'content-type') ?? 'binary/octet-stream',
      metadata: userMetadata(request),
      lastModified: new Date(),
      crc32: body.crc32,
    }
    bucket.objects.set(key, object)
    const headers: Record<string, string> = { etag: object.etag, 'x-amz-request-id': requestId() }
    if (headerOf(request, 'x-amz-checksum-crc32') || headerOf(request, 'x-amz-trailer')) {
      headers['x-amz-checksum-crc32'] = body.crc32
    }
    return { status: 200, headers }
  }

  #getObject(request: FakeRequest, bucket: Bucket, key: string): FakeReply {
    const object = bucket.objects.get(key)
    // A HEAD 404 has no body: the SDK then reports `name: 'NotFound'` (the shell drops HEAD bodies).
    if (!object) return noSuchKey(key)
    const ifMatch = headerOf(request, 'if-match')
    const ifNoneMatch = headerOf(request, 'if-none-match')
    if (!this.lax && ifMatch !== undefined && !etagMatches(ifMatch, object.etag))
      return preconditionFailed('If-Match')
    if (!this.lax && ifNoneMatch !== undefined && etagMatches(ifNoneMatch, object.etag)) {
      return { status: 304, headers: { etag: object.etag } }
    }
    return { status: 200, headers: objectHeaders(object, request), body: object.body }
  }

  #deleteObject(request: FakeRequest, bucket: Bucket, key: string): FakeReply {
    const object = bucket.objects.get(key)
    const ifMatch = headerOf(request, 'if-match')
    if (!this.lax && ifMatch !== undefined && !object && this.settings.deleteAbsent === 404)
      return noSuchKey(key)
    if (!this.lax && object) {
      if (ifMatch !== undefined && !etagMatches(ifMatch, object.etag)) return preconditionFailed('If-Match')
      const time = headerOf(request, 'x-amz-if-match-last-modified-time')
      if (
        time !== undefined &&
        Date.parse(time) !== Math.floor(object.lastModified.getTime() / 1000) * 1000
      ) {
        return preconditionFailed('x-amz-if-match-last-modified-time')
      }
      const size = headerOf(request, 'x-amz-if-match-size')
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
    const contentType = headerOf(request, 'content-type') ?? 'binary/octet-stream'
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
export function startS3Fake(settings: Partial<S3Settings> = {}): Promise<S3Fake> {
  return startHttpFake(
    new S3Dialect(
      {
        ifMatchAbsent: 404,
        deleteAbsent: 204,
        ifNoneMatchOther: 400,
        randomEtags: false,
        rejectAccessKeyId: undefined,
        ...settings,
      },
      (name) => new Bucket(name),
    ),
  )
}
