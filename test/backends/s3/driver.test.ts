/**
 * The S3 driver of the cas-lease engine against the S3 test server (test/servers/s3.ts), through the
 * official SDK: the shared driver cases (cas-driver-cases.ts), plus S3's own: 404 or 412 on an `If-Match`
 * of an absent key, 409 ConditionalRequestConflict, and a user's client never closed.
 */
import assert from 'node:assert/strict'
import { after, before, beforeEach, describe, it } from 'node:test'
import * as sdk from '@aws-sdk/client-s3'
import { S3Client } from '@aws-sdk/client-s3'
import { lockObjectKey, S3CasAdapter } from '../../../src/backends/s3/index.js'
import { type S3Fake, startS3Fake } from '../../servers/s3.js'
import { BUCKET, casDriverCases, freshKey, PREFIX, signal } from '../cas/driver-cases.js'

let server: S3Fake

const client = (maxAttempts = 1) =>
  new S3Client({
    endpoint: server.endpoint,
    forcePathStyle: true,
    region: 'eu-west-3',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts,
  })

const driverOf = (s3: S3Client, bucket = BUCKET) =>
  new S3CasAdapter({
    client: s3,
    bucket,
    prefix: PREFIX,
    id: `s3://${bucket}/${PREFIX}`,
    owned: false,
    sdk: async () => sdk,
  })

describe('s3 driver', { timeout: 60_000 }, () => {
  let s3: S3Client
  before(async () => {
    server = await startS3Fake()
    server.createBucket(BUCKET)
    s3 = client()
  })
  after(async () => {
    s3.destroy()
    await server.close()
  })
  beforeEach(() => server.clearFaults())

  casDriverCases({
    scheme: 's3://',
    server: () => server,
    objectName: lockObjectKey,
    // The SDK's default: 3 attempts.
    driver: ({ bucket, retries } = {}) => driverOf(retries ? client(3) : s3, bucket),
    writeMethod: 'PUT',
    conditions: ['If-None-Match: *', 'If-Match: <ETag>'],
  })

  it('doctor: a warning for a lifecycle rule that expires lock objects, none for one elsewhere', async () => {
    const rule = (id: string, prefix: string) => ({
      ID: id,
      Status: 'Enabled' as const,
      Filter: { Prefix: prefix },
      Expiration: { Days: 1 },
    })
    const lifecycle = async (rules: ReturnType<typeof rule>[]) => {
      const put = new sdk.PutBucketLifecycleConfigurationCommand({
        Bucket: BUCKET,
        LifecycleConfiguration: { Rules: rules },
      })
      await s3.send(put)
      return (await driverOf(s3).doctor(signal)).at(-1)!
    }
    try {
      const elsewhere = await lifecycle([rule('logs', 'logs/')])
      assert.equal(elsewhere.level, 'ok', elsewhere.message)
      const covering = await lifecycle([rule('logs', 'logs/'), rule('everything', '')])
      assert.equal(covering.level, 'warn', covering.message)
      assert.match(covering.message, /lifecycle rule "everything" of bucket .* expires objects under "app\/"/)
    } finally {
      await s3.send(new sdk.DeleteBucketLifecycleCommand({ Bucket: BUCKET }))
    }
  })

  it('refuses a replace of an absent record when the server says 412 instead of 404', async () => {
    server.settings.ifMatchAbsent = 412
    try {
      assert.deepEqual(await driverOf(s3).replace(freshKey(), 'x', '"0"', signal), { ok: false })
    } finally {
      server.settings.ifMatchAbsent = 404
    }
  })

  it('answers a 409 ConditionalRequestConflict with a refusal (the engine re-reads)', async () => {
    const driver = driverOf(s3)
    const key = freshKey()
    server.failNext(1, 409, { method: 'PUT' })
    assert.deepEqual(await driver.create(key, 'x', signal), { ok: false })
    assert.equal(await driver.read(key, signal), undefined, 'nothing was written')
  })

  it('never closes a client it did not make', async () => {
    const own = client()
    await driverOf(own).close()
    assert.equal(await driverOf(own).read(freshKey(), signal), undefined, 'the client still works')
    own.destroy()
  })
})
