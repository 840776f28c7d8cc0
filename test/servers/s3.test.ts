/**
 * Acceptance tests of the S3 test server (cloud-backends.md C.4, T1-T9 and the stream round trip), run
 * through the official `@aws-sdk/client-s3` only, plus one test per fault switch. The probe tests use
 * `maxAttempts: 1` so each SDK call is one request; the retry tests use the SDK's default retries.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { Readable } from 'node:stream'
import { after, before, beforeEach, describe, it } from 'node:test'
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
  S3ServiceException,
  UploadPartCommand,
} from '@aws-sdk/client-s3'
import { awaitLater } from '../support/later.js'
import { waitUntil } from '../support/wait.js'
import { type S3Fake, startS3Fake } from './s3.js'

const BUCKET = 'locks'

let server: S3Fake
let s3: S3Client
let keyNumber = 0
/** A key no other test uses. */
const freshKey = () => `t/key ${++keyNumber}`

const client = (config: S3ClientConfig = {}) =>
  new S3Client({
    endpoint: server.endpoint,
    forcePathStyle: true,
    region: 'eu-west-3',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts: 1,
    ...config,
  })

/** The S3 error a call fails with; fails the test if it succeeds or throws something else. */
async function s3Failure(call: Promise<unknown>): Promise<S3ServiceException> {
  try {
    await call
  } catch (error) {
    assert.ok(error instanceof S3ServiceException, `expected an S3ServiceException, got ${String(error)}`)
    return error
  }
  assert.fail('expected the call to fail')
}

const put = (Key: string, Body: string, conditions: { IfNoneMatch?: string; IfMatch?: string } = {}) =>
  s3.send(new PutObjectCommand({ Bucket: BUCKET, Key, Body, ...conditions }))

async function bodyOf(Key: string): Promise<string> {
  const reply = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key }))
  return reply.Body!.transformToString()
}

const md5Etag = (text: string) => `"${createHash('md5').update(text).digest('hex')}"`

describe('test servers: S3 (through @aws-sdk/client-s3)', { timeout: 60_000 }, () => {
  before(async () => {
    server = await startS3Fake()
    s3 = client()
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }))
  })
  after(async () => {
    s3.destroy()
    await server.close()
  })
  beforeEach(() => {
    server.clearFaults()
    server.clearLog()
  })

  it('T1: a create with If-None-Match: * on a new key succeeds, and the ETag is the quoted MD5', async () => {
    const key = freshKey()
    const reply = await put(key, 'owner-A', { IfNoneMatch: '*' })
    assert.equal(reply.ETag, md5Etag('owner-A'))
    assert.equal(server.peek(BUCKET, key)?.body.toString(), 'owner-A')
  })

  it('T2: a second create gets 412 PreconditionFailed, and the body is unchanged', async () => {
    const key = freshKey()
    await put(key, 'owner-A', { IfNoneMatch: '*' })
    const error = await s3Failure(put(key, 'owner-B', { IfNoneMatch: '*' }))
    assert.equal(error.$metadata.httpStatusCode, 412)
    assert.equal(error.name, 'PreconditionFailed')
    assert.equal((error as S3ServiceException & { Condition?: string }).Condition, 'If-None-Match')
    assert.equal(await bodyOf(key), 'owner-A')
  })

  it('T3, T4: If-Match with the current ETag replaces; with a stale one, 412', async () => {
    const key = freshKey()
    const e1 = (await put(key, 'owner-A', { IfNoneMatch: '*' })).ETag!
    const e2 = (await put(key, 'owner-A2', { IfMatch: e1 })).ETag!
    assert.notEqual(e2, e1)
    const stale = await s3Failure(put(key, 'owner-B', { IfMatch: e1 }))
    assert.equal(stale.$metadata.httpStatusCode, 412)
    assert.equal(stale.name, 'PreconditionFailed')
    assert.equal(await bodyOf(key), 'owner-A2')
    // Tolerant of missing quotes, as the spec asks.
    assert.ok((await put(key, 'owner-A3', { IfMatch: e2.replaceAll('"', '') })).ETag)
  })

  it('T5: If-Match on an absent key is 404 NoSuchKey (412 with ifMatchAbsent: 412)', async () => {
    const absent = await s3Failure(put(freshKey(), 'x', { IfMatch: md5Etag('x') }))
    assert.equal(absent.$metadata.httpStatusCode, 404)
    assert.equal(absent.name, 'NoSuchKey')
    server.settings.ifMatchAbsent = 412
    try {
      const other = await s3Failure(put(freshKey(), 'x', { IfMatch: md5Etag('x') }))
      assert.equal(other.$metadata.httpStatusCode, 412)
    } finally {
      server.settings.ifMatchAbsent = 404
    }
  })

  it('T6, T7: a delete with a stale If-Match is 412 and keeps the object; with the current one, 204', async () => {
    const key = freshKey()
    const e1 = (await put(key, 'owner-A', { IfNoneMatch: '*' })).ETag!
    const e2 = (await put(key, 'owner-A2', { IfMatch: e1 })).ETag!
    const stale = await s3Failure(s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: key, IfMatch: e1 })))
    assert.equal(stale.$metadata.httpStatusCode, 412)
    const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }))
    assert.equal(head.ETag, e2)
    const done = await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: key, IfMatch: e2 }))
    assert.equal(done.$metadata.httpStatusCode, 204)
    assert.equal(server.peek(BUCKET, key), undefined)
  })

  it('a conditional delete of an absent key is 204, or 404 NoSuchKey with deleteAbsent: 404', async () => {
    const gone = await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: freshKey(), IfMatch: '*' }))
    assert.equal(gone.$metadata.httpStatusCode, 204)
    server.settings.deleteAbsent = 404
    try {
      const error = await s3Failure(
        s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: freshKey(), IfMatch: '*' })),
      )
      assert.equal(error.$metadata.httpStatusCode, 404)
      assert.equal(error.name, 'NoSuchKey')
    } finally {
      server.settings.deleteAbsent = 204
    }
  })

  it('T8: of 20 concurrent creates held together by a delay, exactly one wins and 19 get 412', async () => {
    const key = freshKey()
    server.delay(30, { method: 'PUT' })
    const racers = Array.from({ length: 20 }, (_, i) => put(key, `owner-${i}`, { IfNoneMatch: '*' }))
    const results = await Promise.allSettled(racers)
    const winners = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []))
    assert.equal(winners.length, 1)
    for (const r of results) {
      if (r.status === 'rejected')
        assert.equal((r.reason as S3ServiceException).$metadata.httpStatusCode, 412)
    }
    assert.equal(server.peek(BUCKET, key)?.body.toString(), `owner-${winners[0]}`)
  })

  it('T9: CompleteMultipartUpload with If-None-Match: * on an existing key is 412; on a new key it commits', async () => {
    const upload = async (Key: string, conditions: { IfNoneMatch?: string; IfMatch?: string }) => {
      const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key }))
      const part = await s3.send(
        new UploadPartCommand({ Bucket: BUCKET, Key, UploadId, PartNumber: 1, Body: 'part one' }),
      )
      return s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: BUCKET,
          Key,
          UploadId,
          MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag }] },
          ...conditions,
        }),
      )
    }
    const existing = freshKey()
    await put(existing, 'owner-A', { IfNoneMatch: '*' })
    const error = await s3Failure(upload(existing, { IfNoneMatch: '*' }))
    assert.equal(error.$metadata.httpStatusCode, 412)
    assert.equal(await bodyOf(existing), 'owner-A')

    const fresh = freshKey()
    const done = await upload(fresh, { IfNoneMatch: '*' })
    const partMd5 = createHash('md5').update('part one').digest()
    assert.equal(done.ETag, `"${createHash('md5').update(partMd5).digest('hex')}-1"`)
    assert.equal(await bodyOf(fresh), 'part one')
  })

  it('an aborted multipart upload is gone (404 NoSuchUpload on completion)', async () => {
    const Key = freshKey()
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key }))
    await s3.send(new AbortMultipartUploadCommand({ Bucket: BUCKET, Key, UploadId }))
    const error = await s3Failure(
      s3.send(
        new CompleteMultipartUploadCommand({ Bucket: BUCKET, Key, UploadId, MultipartUpload: { Parts: [] } }),
      ),
    )
    assert.equal(error.$metadata.httpStatusCode, 404)
    assert.equal(error.name, 'NoSuchUpload')
  })

  it('a stream body (aws-chunked) round-trips with its MD5 ETag, content type and metadata', async () => {
    const Key = freshKey()
    const reply = await s3.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key,
        Body: Readable.from([Buffer.from('hello '), Buffer.from('world')]),
        ContentLength: 11,
        ContentType: 'application/json',
        Metadata: { owner: 'A', fence: '7' },
        IfNoneMatch: '*',
      }),
    )
    assert.equal(reply.ETag, '"5eb63bbbe01eeed093cb22bb8f5acdc3"')
    const got = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key }))
    assert.equal(await got.Body!.transformToString(), 'hello world')
    assert.equal(got.ContentType, 'application/json')
    assert.deepEqual(got.Metadata, { owner: 'A', fence: '7' })
    assert.equal(got.ETag, reply.ETag)
  })

  it('keys are decoded segment by segment; HEAD of an absent key is 404 NotFound; an absent bucket is NoSuchBucket', async () => {
    await put('dir/a b+c', 'x')
    assert.equal(server.peek(BUCKET, 'dir/a b+c')?.body.toString(), 'x')
    const logged = server.requests.at(-1)!
    assert.equal(logged.path, `/${BUCKET}/dir/a%20b%2Bc`)
    assert.match(logged.query, /x-id=PutObject/)
    const head = await s3Failure(s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: freshKey() })))
    assert.equal(head.$metadata.httpStatusCode, 404)
    assert.equal(head.name, 'NotFound')
    const bucket = await s3Failure(s3.send(new PutObjectCommand({ Bucket: 'nope', Key: 'k', Body: 'x' })))
    assert.equal(bucket.name, 'NoSuchBucket')
    assert.equal((await s3.send(new HeadBucketCommand({ Bucket: BUCKET }))).$metadata.httpStatusCode, 200)
  })

  it('If-None-Match other than * is refused (400 InvalidArgument, or 501 NotImplemented)', async () => {
    const error = await s3Failure(put(freshKey(), 'x', { IfNoneMatch: '"abc"' }))
    assert.equal(error.$metadata.httpStatusCode, 400)
    assert.equal(error.name, 'InvalidArgument')
    server.settings.ifNoneMatchOther = 501
    try {
      assert.equal(
        (await s3Failure(put(freshKey(), 'x', { IfNoneMatch: '"abc"' }))).$metadata.httpStatusCode,
        501,
      )
    } finally {
      server.settings.ifNoneMatchOther = 400
    }
  })

  it('random ETags (Express One Zone, SSE-KMS) are not MD5s and still drive If-Match', async () => {
    server.settings.randomEtags = true
    try {
      const key = freshKey()
      const e1 = (await put(key, 'owner-A', { IfNoneMatch: '*' })).ETag!
      assert.notEqual(e1, md5Etag('owner-A'))
      const e2 = (await put(key, 'owner-A', { IfMatch: e1 })).ETag!
      assert.notEqual(e2, e1)
      assert.equal((await s3Failure(put(key, 'owner-A', { IfMatch: e1 }))).$metadata.httpStatusCode, 412)
    } finally {
      server.settings.randomEtags = false
    }
  })

  it('409 ConditionalRequestConflict when a DELETE commits while a conditional PUT is in flight', async () => {
    const key = freshKey()
    const e1 = (await put(key, 'owner-A', { IfNoneMatch: '*' })).ETag!
    const release = server.hold({ method: 'PUT' })
    const replace = awaitLater(s3Failure(put(key, 'owner-B', { IfMatch: e1 })))
    await waitUntil(() => server.inFlight === 1, 'the conditional PUT to arrive')
    await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: key }))
    release()
    const error = await replace
    assert.equal(error.$metadata.httpStatusCode, 409)
    assert.equal(error.name, 'ConditionalRequestConflict')
  })

  it('ListObjectsV2 lists by prefix, page by page', async () => {
    for (const key of ['list/a', 'list/b', 'list/c', 'other']) await put(key, key)
    const first = await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: 'list/', MaxKeys: 2 }))
    assert.deepEqual(
      first.Contents?.map((o) => [o.Key, o.ETag, o.Size]),
      [
        ['list/a', md5Etag('list/a'), 6],
        ['list/b', md5Etag('list/b'), 6],
      ],
    )
    assert.equal(first.IsTruncated, true)
    const rest = await s3.send(
      new ListObjectsV2Command({
        Bucket: BUCKET,
        Prefix: 'list/',
        ContinuationToken: first.NextContinuationToken!,
      }),
    )
    assert.deepEqual(
      rest.Contents?.map((o) => o.Key),
      ['list/c'],
    )
    assert.equal(rest.IsTruncated, false)
  })

  it('the access key id in rejectAccessKeyId gets 403 InvalidAccessKeyId; any other is accepted', async () => {
    server.settings.rejectAccessKeyId = 'bad-key'
    const rejected = client({ credentials: { accessKeyId: 'bad-key', secretAccessKey: 'x' } })
    try {
      const error = await s3Failure(
        rejected.send(new PutObjectCommand({ Bucket: BUCKET, Key: freshKey(), Body: 'x' })),
      )
      assert.equal(error.$metadata.httpStatusCode, 403)
      assert.equal(error.name, 'InvalidAccessKeyId')
      assert.ok(await put(freshKey(), 'x'))
    } finally {
      rejected.destroy()
      server.settings.rejectAccessKeyId = undefined
    }
  })

  describe('fault switches', () => {
    it('failNext: 409, 429, 500 and 503 answer with S3 error bodies and change nothing', async () => {
      const cases = [
        [409, 'ConditionalRequestConflict'],
        [429, 'SlowDown'],
        [500, 'InternalError'],
        [503, 'SlowDown'],
      ] as const
      for (const [status, name] of cases) {
        const key = freshKey()
        server.failNext(1, status)
        const error = await s3Failure(put(key, 'x', { IfNoneMatch: '*' }))
        assert.equal(error.$metadata.httpStatusCode, status)
        assert.equal(error.name, name)
        assert.equal(server.peek(BUCKET, key), undefined)
        assert.equal(server.requests.at(-1)?.fault, 'failed')
      }
    })

    it('the SDK retries 503 SlowDown by itself: two failures, then the third attempt commits', async () => {
      const retrying = client({ maxAttempts: 3 })
      try {
        server.failNext(2, 503)
        const key = freshKey()
        await retrying.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'x', IfNoneMatch: '*' }))
        assert.deepEqual(
          server.requests.map((r) => [r.method, r.status, r.fault]),
          [
            ['PUT', 503, 'failed'],
            ['PUT', 503, 'failed'],
            ['PUT', 200, undefined],
          ],
        )
      } finally {
        retrying.destroy()
      }
    })

    it('dropResponseAfterCommit: the SDK retries the committed create and reports 412 (the ambiguous case)', async () => {
      const retrying = client({ maxAttempts: 3 })
      try {
        server.dropResponseAfterCommit(1, { method: 'PUT' })
        const key = freshKey()
        const error = await s3Failure(
          retrying.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: 'mine', IfNoneMatch: '*' })),
        )
        // Our own first attempt won: only re-reading the owner in the record can tell.
        assert.equal(error.$metadata.httpStatusCode, 412)
        assert.equal(server.peek(BUCKET, key)?.body.toString(), 'mine')
        assert.deepEqual(
          server.requests.map((r) => [r.status, r.fault]),
          [
            [200, 'dropped'],
            [412, undefined],
          ],
        )
      } finally {
        retrying.destroy()
      }
    })

    it('a fault matched by method and path leaves other requests alone', async () => {
      const key = freshKey()
      await put(key, 'x')
      server.failNext(1, 500, {
        method: 'GET',
        path: `/${BUCKET}/${encodeURIComponent(key).replace('%2F', '/')}`,
      })
      await put(freshKey(), 'y')
      assert.equal((await s3Failure(bodyOf(key))).$metadata.httpStatusCode, 500)
      assert.equal(await bodyOf(key), 'x')
    })

    it('hold keeps a request between arrival and commit: a later request is answered first', async () => {
      const slow = freshKey()
      const release = server.hold({ path: `/${BUCKET}/t/${encodeURIComponent(slow.slice(2))}` })
      const pending = awaitLater(put(slow, 'slow'))
      await waitUntil(() => server.inFlight === 1, 'the held PUT to arrive')
      const fast = freshKey()
      await put(fast, 'fast')
      release()
      await pending
      assert.deepEqual(
        server.requests.map((r) => r.path),
        [
          `/${BUCKET}/t/${encodeURIComponent(fast.slice(2))}`,
          `/${BUCKET}/t/${encodeURIComponent(slow.slice(2))}`,
        ],
      )
    })

    it('lax mode ignores preconditions like s3rver: T2 and T8 then fail (what doctor must catch)', async () => {
      server.lax(true)
      const key = freshKey()
      await put(key, 'owner-A', { IfNoneMatch: '*' })
      await put(key, 'owner-B', { IfNoneMatch: '*' })
      assert.equal(await bodyOf(key), 'owner-B')
      const raced = freshKey()
      server.delay(30, { method: 'PUT' })
      const results = await Promise.allSettled(
        Array.from({ length: 5 }, (_, i) => put(raced, `o${i}`, { IfNoneMatch: '*' })),
      )
      assert.equal(results.filter((r) => r.status === 'fulfilled').length, 5)
      server.lax(false)
      assert.equal((await s3Failure(put(key, 'owner-C', { IfNoneMatch: '*' }))).$metadata.httpStatusCode, 412)
    })

    it('delay(ms) widens the window between arrival and commit (the request still commits)', async () => {
      const key = freshKey()
      server.delay(50, { method: 'PUT' })
      const pending = awaitLater(put(key, 'late'))
      await waitUntil(() => server.inFlight === 1, 'the delayed PUT to arrive')
      assert.equal(server.peek(BUCKET, key), undefined)
      await pending
      assert.equal(server.peek(BUCKET, key)?.body.toString(), 'late')
    })

    it('restart keeps the port and the objects; a stopped server refuses connections', async () => {
      // A restart cuts the SDK's kept-alive sockets, as a real outage does: its default retry covers that.
      const retrying = client({ maxAttempts: 3 })
      const get = async (Key: string) => {
        const reply = await retrying.send(new GetObjectCommand({ Bucket: BUCKET, Key }))
        return reply.Body!.transformToString()
      }
      try {
        const key = freshKey()
        const etag = (await put(key, 'durable', { IfNoneMatch: '*' })).ETag
        const port = server.port
        await server.restart()
        assert.equal(server.port, port)
        assert.equal(await get(key), 'durable')
        await server.stop()
        await assert.rejects(get(key))
        await server.start()
        assert.equal((await retrying.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }))).ETag, etag)
      } finally {
        retrying.destroy()
      }
    })
  })
})
