/**
 * A faithful Google Cloud Storage test server (the JSON API subset), in-process (node:http on 127.0.0.1,
 * port 0), built to shared/research/cloud-backends.md Part C.2. The GCS backend is tested against this
 * server, NOT against Google: no installable emulator honours GCS preconditions (fake-gcs-server cannot be
 * installed here, the Firebase emulator ignores them). Clients: `new Storage({ apiEndpoint: endpoint,
 * projectId: 'any' })` (with a custom endpoint and a project the SDK sends no auth and never asks the
 * metadata server).
 *
 * Faithful (checked with `@google-cloud/storage` 7.x in gcs.test.ts, G1-G9 in both upload modes):
 * - buckets (create: 409 conflict when it exists; get; patch of `lifecycle`, kept, not applied), objects: upload with `uploadType=media`,
 *   `multipart` (`file.save(…, { resumable: false })`) and `resumable` (start, single-request
 *   `bytes 0-*\/*`, chunks answered 308 with `Range`, status queries, a finished session answers 200 again),
 *   get metadata, download (`alt=media`, also under /download), patch metadata (merge, `null` deletes a key),
 *   delete, list (prefix, pages);
 * - `ifGenerationMatch` (0 = no live object), `ifGenerationNotMatch`, `ifMetagenerationMatch`,
 *   `ifMetagenerationNotMatch`, parsed as 64-bit integers: 412 conditionNotMet on mutations and metadata
 *   GETs, 304 for `*NotMatch` on reads; 404 notFound for an absent object first (settings);
 * - generations strictly increase per name, also across deletes (a per-name high-water mark), never
 *   reused; optionally random (unique, unordered: what the current docs promise); metageneration 1 per new
 *   generation, +1 per patch;
 * - exact `md5Hash` and `crc32c` (the SDK validates them after every upload and DELETEs the object on a
 *   mismatch), `x-goog-hash` on downloads; the JSON error bodies the SDK parses (`err.code`,
 *   `err.errors[0].reason`);
 * - optional per-object mutation rate limit (429 rateLimitExceeded), off by default;
 * - the precondition check and the write are one synchronous step (http-fake.ts), so races have one winner.
 * Not implemented (C.3): auth, ACLs, signed URLs, encryption, retention, applying lifecycle rules, CORS, the XML API, gRPC,
 * versioning (a `generation` parameter only addresses the live generation), compose, rewrite/copy. Unknown
 * requests get 501.
 * Files: this one holds the operations and the state (a little over 300 lines: one operation per method,
 * kept together so each precondition reads beside its write); gcs-wire.ts the object resource, errors,
 * preconditions and paths; http-fake.ts the HTTP shell; fake-faults.ts the fault switches.
 */
import { randomBytes } from 'node:crypto'
import {
  faultReply,
  type GcsStoredObject,
  gcsError,
  googHash,
  invalidJson,
  jsonReply,
  multipartParts,
  noBucket,
  notFound,
  notImplemented,
  type ObjectFields,
  objectResource,
  parseJson,
  patchedFields,
  preconditionRefusal,
  route,
} from './gcs-wire.js'
import {
  BucketDialect,
  type Commit,
  type FakeReply,
  type FakeRequest,
  type FakeServer,
  headerOf,
  startHttpFake,
} from './http-fake.js'

export type { GcsStoredObject } from './gcs-wire.js'

/** The behaviours the docs leave open; mutable on a running server, so one test can try both. */
export interface GcsSettings {
  /** Whether 404 notFound wins over a failed precondition on an absent object (patch, delete, get). @default true */
  notFoundFirst: boolean
  /** Random, unordered (but unique) generations instead of increasing ones. @default false */
  randomGenerations: boolean
  /** A second content write or metadata update of one name within this many ms gets 429; 0 is off. @default 0 */
  mutationIntervalMs: number
}

/** A running GCS test server: `settings`, `createBucket(name)` and `peek(bucket, name)` come with it. */
export type GcsFake = FakeServer<GcsSettings, GcsStoredObject>

interface UploadSession {
  readonly bucket: string
  readonly name: string
  readonly fields: ObjectFields
  /** The upload's query (its preconditions are checked at finalize). */
  readonly query: URLSearchParams
  readonly chunks: Buffer[]
  received: number
  /** The reply of the commit, once finalized: a status query gets it again. */
  finished?: FakeReply
}

class Bucket {
  readonly objects = new Map<string, GcsStoredObject>()
  /** Per name: the highest generation ever given (kept across deletes, so a generation is never reused). */
  readonly highWater = new Map<string, bigint>()
  /** Per name: when (monotonic ms) the last mutation committed, for the optional rate limit. */
  readonly lastMutation = new Map<string, number>()
  /** The bucket's `lifecycle` metadata (`{ rule: [...] }`), as last patched. */
  lifecycle: unknown
  metageneration = 1n
  constructor(readonly name: string) {}
}

/** The GCS dialect: routes a request to its operation over the buckets. */
class GcsDialect extends BucketDialect<GcsSettings, GcsStoredObject, Bucket> {
  readonly sessions = new Map<string, UploadSession>()
  /** Every random generation given, so none repeats. */
  readonly #randomGiven = new Set<bigint>()

  faultReply(status: number): FakeReply {
    return faultReply(status)
  }

  arrive(request: FakeRequest): Commit {
    return (body) => {
      const where = route(request.path)
      if (!where) return notImplemented(`${request.method} ${request.path}`)
      const endpoint = `http://${headerOf(request, 'host') ?? '127.0.0.1'}`
      if (where.bucket === undefined) {
        return request.method === 'POST' ? this.#createBucket(body) : notImplemented('listing buckets')
      }
      const bucket = this.buckets.get(where.bucket)
      if (!bucket) return noBucket()
      if (!where.objects) return this.#bucketOperation(request, bucket, body)
      if (where.api === 'upload/storage') return this.#upload(request, bucket, body, endpoint)
      if (where.name === undefined) {
        return request.method === 'GET'
          ? this.#list(request, bucket, endpoint)
          : notImplemented(request.method)
      }
      return this.#objectOperation(request, bucket, where.name, body, endpoint)
    }
  }

  /**
   * Get and patch a bucket's metadata: only `lifecycle` is kept (set by `bucket.setMetadata({ lifecycle })`
   * or `addLifecycleRule`, read back by `getMetadata()`); its rules are not applied (nothing is deleted).
   */
  #bucketOperation(request: FakeRequest, bucket: Bucket, body: Buffer): FakeReply {
    if (request.method === 'PATCH') {
      const fields = parseJson(body) as { lifecycle?: unknown } | undefined
      if (!fields) return invalidJson()
      if ('lifecycle' in fields) bucket.lifecycle = fields.lifecycle ?? undefined
      bucket.metageneration += 1n
    } else if (request.method !== 'GET') return notImplemented(`${request.method} on a bucket`)
    return jsonReply(200, {
      kind: 'storage#bucket',
      id: bucket.name,
      name: bucket.name,
      metageneration: bucket.metageneration.toString(),
      ...(bucket.lifecycle === undefined ? {} : { lifecycle: bucket.lifecycle }),
    })
  }

  #createBucket(body: Buffer): FakeReply {
    const name = parseJson(body)?.name
    if (typeof name !== 'string' || !name) return gcsError(400, 'required', 'Required: name')
    if (this.buckets.has(name))
      return gcsError(
        409,
        'conflict',
        'Your previous request to create the named bucket succeeded and you already own it.',
      )
    this.buckets.set(name, new Bucket(name))
    return jsonReply(200, { kind: 'storage#bucket', id: name, name, metageneration: '1' })
  }

  #objectOperation(
    request: FakeRequest,
    bucket: Bucket,
    name: string,
    body: Buffer,
    endpoint: string,
  ): FakeReply {
    const current = bucket.objects.get(name)
    const generation = request.query.get('generation')
    const live =
      current && (generation === null || generation === current.generation.toString()) ? current : undefined
    const read = request.method === 'GET'
    if (!['GET', 'PATCH', 'DELETE'].includes(request.method))
      return notImplemented(`${request.method} on an object`)
    if (!live && this.settings.notFoundFirst) return notFound(`${bucket.name}/${name}`)
    const refusal = this.lax ? undefined : preconditionRefusal(request.query, live, read)
    if (refusal) return refusal
    if (!live) return notFound(`${bucket.name}/${name}`)
    if (read) return this.#read(request, bucket.name, { ...live, name }, endpoint)
    const limited = this.#rateLimited(bucket, name)
    if (limited) return limited
    if (request.method === 'DELETE') {
      bucket.objects.delete(name)
      return { status: 204 }
    }
    const fields = parseJson(body)
    if (!fields) return invalidJson()
    const patched = {
      ...patchedFields(live, fields),
      metageneration: live.metageneration + 1n,
      updated: new Date(),
    }
    bucket.objects.set(name, patched)
    return jsonReply(200, objectResource(bucket.name, { ...patched, name }, endpoint))
  }

  #read(request: FakeRequest, bucket: string, object: GcsStoredObject & { name: string }, endpoint: string) {
    if (request.query.get('alt') !== 'media') return jsonReply(200, objectResource(bucket, object, endpoint))
    return {
      status: 200,
      headers: {
        'content-type': object.contentType,
        'x-goog-generation': object.generation.toString(),
        'x-goog-metageneration': object.metageneration.toString(),
        'x-goog-stored-content-length': String(object.body.length),
        'x-goog-hash': googHash(object.body),
      },
      body: object.body,
    }
  }

  #list(request: FakeRequest, bucket: Bucket, endpoint: string): FakeReply {
    const prefix = request.query.get('prefix') ?? ''
    const after = request.query.get('pageToken') ?? ''
    const max = Number(request.query.get('maxResults') ?? 1000)
    const names = [...bucket.objects.keys()].filter((n) => n.startsWith(prefix) && n > after).sort()
    const page = names.slice(0, max)
    const items = page.map((name) =>
      objectResource(bucket.name, { ...bucket.objects.get(name)!, name }, endpoint),
    )
    const more = names.length > page.length ? { nextPageToken: page.at(-1) } : {}
    return jsonReply(200, { kind: 'storage#objects', ...(items.length ? { items } : {}), ...more })
  }

  #upload(request: FakeRequest, bucket: Bucket, body: Buffer, endpoint: string): FakeReply {
    const type = request.query.get('uploadType')
    if (request.method === 'PUT' && request.query.has('upload_id'))
      return this.#resumeUpload(request, bucket, body, endpoint)
    if (request.method !== 'POST') return notImplemented(`${request.method} upload`)
    if (type === 'media') {
      const fields = { contentType: headerOf(request, 'content-type') ?? 'application/octet-stream' }
      return this.#commitUpload(
        bucket,
        request.query.get('name') ?? '',
        fields,
        request.query,
        body,
        endpoint,
      )
    }
    if (type === 'multipart') {
      const parts = multipartParts(headerOf(request, 'content-type') ?? '', body)
      const fields = parts?.length === 2 ? parseJson(parts[0]!.bytes) : undefined
      if (!parts || !fields) return gcsError(400, 'invalid', 'Invalid multipart request')
      const name = request.query.get('name') ?? fields.name ?? ''
      const withType = { ...fields, contentType: fields.contentType ?? parts[1]!.type }
      return this.#commitUpload(bucket, name, withType, request.query, parts[1]!.bytes, endpoint)
    }
    if (type === 'resumable') return this.#startSession(request, bucket, body, endpoint)
    return gcsError(400, 'invalid', `Invalid upload type: ${type}`)
  }

  #startSession(request: FakeRequest, bucket: Bucket, body: Buffer, endpoint: string): FakeReply {
    const fields = parseJson(body)
    if (!fields) return invalidJson()
    const name = request.query.get('name') ?? fields.name ?? ''
    if (!name) return gcsError(400, 'required', 'Required: name')
    const contentType =
      fields.contentType ?? headerOf(request, 'x-upload-content-type') ?? 'application/octet-stream'
    const id = randomBytes(16).toString('hex')
    this.sessions.set(id, {
      bucket: bucket.name,
      name,
      fields: { ...fields, contentType },
      query: request.query,
      chunks: [],
      received: 0,
    })
    const location = `${endpoint}/upload/storage/v1/b/${encodeURIComponent(bucket.name)}/o?uploadType=resumable&name=${encodeURIComponent(name)}&upload_id=${id}`
    return { status: 200, headers: { location, 'content-length': '0' } }
  }

  /**
   * A resumable session's PUT: `bytes a-*\/…` (the body ends the upload), `bytes a-b/*` (a chunk: 308),
   * `bytes a-b/T` (final when b+1 = T), `bytes *\/…` (a status query).
   */
  #resumeUpload(request: FakeRequest, bucket: Bucket, body: Buffer, endpoint: string): FakeReply {
    const session = this.sessions.get(request.query.get('upload_id')!)
    if (!session || session.bucket !== bucket.name) return gcsError(404, 'notFound', 'No such upload session')
    if (session.finished) return session.finished
    const range = /^bytes (\*|(\d+)-(\d+|\*))\/(\d+|\*)$/.exec(
      headerOf(request, 'content-range') ?? 'bytes */*',
    )
    if (!range) return gcsError(400, 'invalid', 'Invalid Content-Range')
    const [, , first, last, total] = range
    const incomplete = (): FakeReply => ({
      status: 308,
      headers: session.received > 0 ? { range: `bytes=0-${session.received - 1}` } : {},
    })
    if (first === undefined) return incomplete()
    if (Number(first) !== session.received) return incomplete()
    session.chunks.push(body)
    session.received += body.length
    const final = last === '*' || (total !== '*' && session.received === Number(total))
    if (!final) return incomplete()
    const reply = this.#commitUpload(
      bucket,
      session.name,
      session.fields,
      session.query,
      Buffer.concat(session.chunks),
      endpoint,
    )
    if (reply.status === 200) session.finished = reply
    else {
      session.chunks.length = 0
      session.received = 0
    }
    return reply
  }

  /** The atomic step of every upload: preconditions against the live object, then the new generation. */
  #commitUpload(
    bucket: Bucket,
    name: string,
    fields: ObjectFields,
    query: URLSearchParams,
    body: Buffer,
    endpoint: string,
  ) {
    if (!name) return gcsError(400, 'required', 'Required: name')
    const current = bucket.objects.get(name)
    const refusal = this.lax ? undefined : preconditionRefusal(query, current, false)
    if (refusal) return refusal
    const limited = this.#rateLimited(bucket, name)
    if (limited) return limited
    const now = new Date()
    const object: GcsStoredObject = {
      ...patchedFields({ body, contentType: 'application/octet-stream', metadata: {} }, fields),
      body,
      generation: this.#nextGeneration(bucket, name),
      metageneration: 1n,
      timeCreated: now,
      updated: now,
    }
    bucket.objects.set(name, object)
    return jsonReply(200, objectResource(bucket.name, { ...object, name }, endpoint))
  }

  /** max(high-water + 1, now in µs): strictly increasing per name, across deletes too; or random and unique. */
  #nextGeneration(bucket: Bucket, name: string): bigint {
    if (this.settings.randomGenerations) {
      let generation = 0n
      while (generation === 0n || this.#randomGiven.has(generation)) {
        generation = BigInt(`0x${randomBytes(6).toString('hex')}`) + 1n
      }
      this.#randomGiven.add(generation)
      return generation
    }
    const nowMicros = BigInt(Date.now()) * 1000n
    const previous = bucket.highWater.get(name) ?? 0n
    const generation = nowMicros > previous ? nowMicros : previous + 1n
    bucket.highWater.set(name, generation)
    return generation
  }

  /** The optional per-object limit (GCS allows about one mutation per second per object name). */
  #rateLimited(bucket: Bucket, name: string): FakeReply | undefined {
    const interval = this.settings.mutationIntervalMs
    if (interval <= 0) return undefined
    const now = performance.now()
    const last = bucket.lastMutation.get(name)
    if (last !== undefined && now - last < interval) return faultReply(429)
    bucket.lastMutation.set(name, now)
    return undefined
  }
}

/** Starts a GCS test server on 127.0.0.1 (a fresh port) with no buckets. */
export function startGcsFake(settings: Partial<GcsSettings> = {}): Promise<GcsFake> {
  return startHttpFake(
    new GcsDialect(
      { notFoundFirst: true, randomGenerations: false, mutationIntervalMs: 0, ...settings },
      (name) => new Bucket(name),
    ),
  )
}
